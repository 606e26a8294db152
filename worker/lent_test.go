package worker_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/worker"
)

// lentQueue stands in for a prefill service's queue.
type lentQueue struct {
	tokens  atomic.Uint64
	emptied engine.Broadcast
}

func (q *lentQueue) QueuedTokens() uint64          { return q.tokens.Load() }
func (q *lentQueue) QueueEmptied() <-chan struct{} { return q.emptied.Wait() }

// A lender's load report carries its prefill service's queue, and the moment
// that queue empties is pushed to subscribers, not left for the next heartbeat
// (here an hour away): the router takes a lender back as a decode candidate on
// that report (--lenders-prefill-first).
func TestLentQueueIsReported(t *testing.T) {
	eng := newSim(t)
	svc := worker.New(workerID, incarnation, workerv1.WorkerMode_WORKER_MODE_AGGREGATED, version, eng)
	svc.Heartbeat = time.Hour
	q := &lentQueue{}
	q.tokens.Store(700)
	svc.SetLentQueue(q)
	_, stream := subscribe(rpctest.Context(t), t, svc)
	first, err := stream.recv()
	if err != nil || first.GetLoad().GetLentWaitingTokens() != 700 {
		t.Fatalf("first message %v, %v: want 700 lent waiting tokens", first, err)
	}
	q.tokens.Store(0)
	q.emptied.Fire()
	next, err := stream.recv()
	if err != nil || next.GetLoad().GetLentWaitingTokens() != 0 {
		t.Fatalf("after the queue emptied: %v, %v; want a message with none", next, err)
	}
}
