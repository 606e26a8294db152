package prefill_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
	"github.com/tandem-serve/tandem/proto/tandem/prefill/v1/prefillv1connect"
)

// The service's queue is what a lender's load report carries
// (lent_waiting_tokens): a prompt counts from the moment it is accepted, and
// QueueEmptied wakes the reporter when the last one leaves, here by the decode
// worker going away.
func TestQueuedTokensAndEmptied(t *testing.T) {
	svc := newService(t, newEngineAt(t, 1e6)) // the prompt stays queued: its first step takes hours
	if q := svc.QueuedTokens(); q != 0 {
		t.Fatalf("a new service holds %d tokens", q)
	}
	mux := http.NewServeMux()
	mux.Handle(prefillv1connect.NewPrefillServiceHandler(svc))
	c := rpctest.ServeStream[prefillv1.PrefillRequest, prefillv1.PrefillResponse](t, mux, prefillv1connect.PrefillServicePrefillProcedure)[0]

	const n = 300
	tctx := rpctest.Context(t)
	ctx, cancel := context.WithCancel(tctx)
	done := make(chan error, 1)
	go func() {
		_, err := c.Do(ctx, &prefillv1.PrefillRequest{RequestId: "q1", PromptTokenIds: prompt(n, 1)})
		done <- err
	}()
	for svc.QueuedTokens() != n {
		select {
		case err := <-done:
			t.Fatalf("the prefill ended (%v) before its %d tokens showed in the queue (%d)", err, n, svc.QueuedTokens())
		case <-tctx.Done():
			t.Fatalf("queue %d tokens, want %d", svc.QueuedTokens(), n)
		case <-time.After(time.Millisecond):
		}
	}
	emptied := svc.QueueEmptied()
	select {
	case <-emptied:
		t.Fatal("QueueEmptied closed while a prompt is queued")
	default:
	}
	cancel()
	<-done
	select {
	case <-emptied:
	case <-tctx.Done():
		t.Fatal("QueueEmptied never closed after the only prompt left")
	}
	if q := svc.QueuedTokens(); q != 0 {
		t.Errorf("queue %d tokens after the only prompt left", q)
	}
}
