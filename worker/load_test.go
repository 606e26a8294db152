package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/sim"
	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/worker"
)

// A prompt joining a prefill worker's queue is reported when it joins, not at the
// next heartbeat (here an hour away): decode workers choose between prefill
// workers by that queue, and a stale one let them all join the same.
func TestQueuedPromptIsPushedToSubscribers(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.TimeScale = 1e6 // the prompt stays queued: its first step takes hours
	eng, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	svc := worker.New(workerID, incarnation, workerv1.WorkerMode_WORKER_MODE_PREFILL, version, eng)
	svc.Heartbeat = time.Hour
	ctx := rpctest.Context(t)
	_, stream := subscribe(ctx, t, svc)
	first, err := stream.recv()
	if err != nil || first.GetLoad().GetWaitingTokens() != 0 {
		t.Fatalf("first message %v, %v: want an empty queue", first, err)
	}

	const promptLen = 3000
	prompt := make([]uint32, promptLen)
	for i := range prompt {
		prompt[i] = uint32(i + 1)
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if exp, err := eng.Prefill(pctx, engine.Request{ID: "r1", Prompt: prompt, MaxTokens: 1}); err == nil {
			exp.Release()
		}
	}()
	// Messages until the queue shows the prompt; the stream ends with the test's
	// context if it never does.
	for {
		msg, err := stream.recv()
		if err != nil {
			t.Fatalf("no message showed the queued prompt: %v", err)
		}
		if msg.GetLoad().GetWaitingTokens() == promptLen {
			break
		}
	}
	cancel()
	<-done
}
