package openaihttp

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Timeouts bound each wait on an engine server, so that an engine that accepts a
// request and then falls silent ends it with an error instead of holding it (and
// its client) forever. A prefill leg is also bounded by its caller's deadline,
// which the decode worker derives from its estimate.
type Timeouts struct {
	// Header bounds the wait for a streamed request's response headers; engines
	// send them before the first token, so this is short.
	Header time.Duration
	// FirstToken bounds the wait from the headers to the first streamed event, and
	// a non-streamed request (a prefill leg, one token) as a whole: it covers the
	// engine's queue and the prompt's prefill.
	FirstToken time.Duration
	// Token bounds the gap between streamed events after the first.
	Token time.Duration
}

// DefaultTimeouts are generous enough for a loaded GPU engine's queue and short
// enough that a silent engine fails a request well within a client's patience.
var DefaultTimeouts = Timeouts{Header: 30 * time.Second, FirstToken: 2 * time.Minute, Token: 30 * time.Second}

// orDefaults fills zero fields from DefaultTimeouts.
func (t Timeouts) orDefaults() Timeouts {
	if t.Header <= 0 {
		t.Header = DefaultTimeouts.Header
	}
	if t.FirstToken <= 0 {
		t.FirstToken = DefaultTimeouts.FirstToken
	}
	if t.Token <= 0 {
		t.Token = DefaultTimeouts.Token
	}
	return t
}

// StallError is a wait on the engine that outlived its bound. It is a
// DeadlineExceeded to callers that classify errors (the client sees 504), and
// names the engine, the wait and the flag that sets its bound.
type StallError struct {
	Where string // "vllm at http://host:port"
	Wait  string // "response headers", "the first token", "the next token"
	After time.Duration
	Flag  string
}

func (e *StallError) Error() string {
	return fmt.Sprintf("%s sent no %s within %s (%s)", e.Where, e.Wait, e.After, e.Flag)
}

func (e *StallError) Unwrap() error { return context.DeadlineExceeded }

// The flags that set each bound, named in StallError so that an operator knows
// what to raise. They are the worker's (services/workersvc); the names are
// carried here as text only.
const (
	flagHeader     = "--engine-header-timeout"
	flagFirstToken = "--engine-first-token-timeout"
	flagToken      = "--engine-token-timeout"
)

// watchdog cancels a request whose engine falls silent for longer than the bound
// of the wait it is in. Arming it again per token is a timer reset, which
// allocates nothing.
type watchdog struct {
	mu     sync.Mutex
	t      *time.Timer
	cancel context.CancelCauseFunc
	where  string
	err    *StallError // the wait now armed
}

func newWatchdog(cancel context.CancelCauseFunc, where string) *watchdog {
	return &watchdog{cancel: cancel, where: where}
}

// arm starts (or restarts) the bound of one wait.
func (w *watchdog) arm(wait string, after time.Duration, flag string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil && w.err.Wait == wait && w.t != nil {
		w.t.Reset(after)
		return
	}
	err := &StallError{Where: w.where, Wait: wait, After: after, Flag: flag}
	w.err = err
	if w.t != nil {
		w.t.Stop()
	}
	w.t = time.AfterFunc(after, func() { w.cancel(err) })
}

// stop disarms it for good.
func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.t != nil {
		w.t.Stop()
	}
}
