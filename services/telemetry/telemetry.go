// Package telemetry holds what every service shares for being observed: the request
// id carried through contexts and headers, and the process logger.
package telemetry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
)

// RequestIDHeader carries the request id between the client, the frontend and every
// service behind it, so one id finds every log line of a request.
const RequestIDHeader = "x-request-id"

type ctxKey struct{}

// WithRequestID returns a context carrying id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// RequestID returns the context's request id, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(ctxKey{}).(string)
	return id
}

// NewRequestID returns a random 128-bit id in hex.
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// NewLogger returns a JSON logger at level ("debug", "info", "warn", "error"), with
// the service name on every line.
func NewLogger(w io.Writer, level, service string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, err
	}
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})
	return slog.New(h).With("service", service), nil
}
