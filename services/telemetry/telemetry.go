// Package telemetry holds what every service shares for being observed: the process
// logger and the tracer provider. (The request id every log line carries is package internal/requestid.)
package telemetry

import (
	"io"
	"log/slog"
)

// NewLogger returns a JSON logger at level ("debug", "info", "warn", "error"), with
// the service name on every line, and the trace and span ids on every line logged
// with a context that holds a span.
func NewLogger(w io.Writer, level, service string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, err
	}
	h := traceHandler{slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})}
	return slog.New(h).With("service", service), nil
}
