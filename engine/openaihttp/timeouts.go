package openaihttp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandem-serve/tandem/engine"
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
	// Settings name, in a StallError, where an operator changes each bound (the
	// worker gives its flags); empty: the field's name.
	HeaderSetting, FirstTokenSetting, TokenSetting string
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
	t.HeaderSetting = cmp.Or(t.HeaderSetting, "Timeouts.Header")
	t.FirstTokenSetting = cmp.Or(t.FirstTokenSetting, "Timeouts.FirstToken")
	t.TokenSetting = cmp.Or(t.TokenSetting, "Timeouts.Token")
	return t
}

// bound is one of the three waits Timeouts bounds.
type bound int

const (
	boundHeader bound = iota
	boundFirstToken
	boundToken
)

// of is a bound's duration and the setting that changes it.
func (t Timeouts) of(b bound) (time.Duration, string) {
	switch b {
	case boundHeader:
		return t.Header, t.HeaderSetting
	case boundFirstToken:
		return t.FirstToken, t.FirstTokenSetting
	}
	return t.Token, t.TokenSetting
}

// StallError is a wait on the engine that outlived its bound. It is a
// DeadlineExceeded to callers that classify errors (the client sees 504), and
// names the engine, the wait and the setting of its bound.
type StallError struct {
	Where   string // "vllm at http://host:port"
	Wait    string // "response headers", "first token", "next token"
	After   time.Duration
	Setting string // what sets the bound, e.g. the worker's flag
	bound   bound
}

func (e *StallError) Error() string {
	return fmt.Sprintf("%s sent no %s within %s (%s)", e.Where, e.Wait, e.After, e.Setting)
}

func (e *StallError) Unwrap() error { return context.DeadlineExceeded }

// watchdog cancels a request whose engine falls silent for longer than the bound
// of the wait it is in. Arming it again per token is a timer reset, which
// allocates nothing.
type watchdog struct {
	mu     sync.Mutex
	t      *time.Timer
	cancel context.CancelCauseFunc
	where  string
	bounds Timeouts
	err    *StallError // the wait now armed
}

func newWatchdog(cancel context.CancelCauseFunc, where string, bounds Timeouts) *watchdog {
	return &watchdog{cancel: cancel, where: where, bounds: bounds}
}

// arm starts (or restarts) the bound b of one wait.
func (w *watchdog) arm(wait string, b bound) {
	w.mu.Lock()
	defer w.mu.Unlock()
	after, setting := w.bounds.of(b)
	if w.err != nil && w.err.Wait == wait && w.t != nil {
		w.t.Reset(after)
		return
	}
	err := &StallError{Where: w.where, Wait: wait, After: after, Setting: setting, bound: b}
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

// FailureReasons name the ways a request to the engine fails, for metrics:
// the server unreachable or refusing (unavailable), the request refused
// (rejected), an answer that is not the protocol (protocol), a stream that
// broke (broken_stream), and each wait that outlived its bound.
var FailureReasons = []string{"unavailable", "rejected", "protocol", "broken_stream", "timeout_headers", "timeout_first_token", "timeout_token"}

// failures counts them.
type failures struct {
	n [7]atomic.Uint64 // by FailureReasons' index
}

// reasonOf is err's FailureReasons index, or -1 for a caller's own cancel.
func reasonOf(err error) int {
	var stall *StallError
	var pe *ProtocolError
	switch {
	case errors.As(err, &stall):
		return 4 + int(stall.bound) // timeout_headers, timeout_first_token, timeout_token
	case errors.Is(err, context.Canceled):
		return -1
	case errors.As(err, &pe):
		return 2
	case errors.Is(err, engine.ErrUnavailable):
		return 0
	case errors.Is(err, engine.ErrRejected):
		return 1
	}
	return 3
}

// count records err (if it is a failure) and returns it.
func (e *Engine) count(err error) error {
	if err != nil {
		if i := reasonOf(err); i >= 0 {
			e.failures.n[i].Add(1)
		}
	}
	return err
}

// Failures are the requests that failed so far, by FailureReasons.
func (e *Engine) Failures() map[string]uint64 {
	out := make(map[string]uint64, len(FailureReasons))
	for i, r := range FailureReasons {
		out[r] = e.failures.n[i].Load()
	}
	return out
}
