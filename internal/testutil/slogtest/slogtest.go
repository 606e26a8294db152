// Package slogtest records log records, for tests that check what was logged and
// at which level.
package slogtest

import (
	"context"
	"log/slog"
	"sync"
)

// Recorder is a slog.Handler that keeps every record at every level. Attributes
// added with WithAttrs and groups are not kept: tests read a record's message,
// level and own attributes.
type Recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

var _ slog.Handler = (*Recorder)(nil)

func (r *Recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *Recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *Recorder) WithGroup(string) slog.Handler            { return r }

func (r *Recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}

// Records is a copy of what has been logged so far.
func (r *Recorder) Records() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]slog.Record(nil), r.recs...)
}
