// Package testutil holds what tests across tandem share: waiting for a condition
// and reading an engine stream to its end. The test-only packages live beside it
// (fakeengine, enginereplay, rpctest, testmodel, poolengine, slogtest, soaktest).
package testutil

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/engine"
)

// WaitFor polls cond until it holds, failing the test after 10 s with what it
// waited for.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	WaitForWithin(t, 10*time.Second, what, cond)
}

// WaitForWithin is WaitFor with another limit.
func WaitForWithin(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Eventually polls cond every interval until it holds or limit passes, and
// reports whether it held: for conditions that cost a process or a round trip
// (docker, Consul), and for waits whose failure the caller reports itself.
func Eventually(limit, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
	return true
}

// Drain reads s to its end and closes it, as a client does, returning the
// tokens; an error before the end fails the test.
func Drain(t testing.TB, ctx context.Context, s engine.Stream) []uint32 {
	t.Helper()
	toks, _ := DrainText(t, ctx, s)
	return toks
}

// DrainText is Drain that also returns the text a client is sent when the
// stream carries the engine's own (engine.TextStream), else "".
func DrainText(t testing.TB, ctx context.Context, s engine.Stream) ([]uint32, string) {
	t.Helper()
	defer s.Close()
	ts, _ := s.(engine.TextStream)
	var toks []uint32
	var text []byte
	for {
		tok, err := s.Next(ctx)
		if errors.Is(err, io.EOF) {
			return toks, string(text)
		}
		if err != nil {
			t.Fatalf("stream after %d tokens: %v", len(toks), err)
		}
		toks = append(toks, tok)
		if ts != nil {
			if piece, ok := ts.Text(); ok {
				text = append(text, piece...)
			}
		}
	}
}
