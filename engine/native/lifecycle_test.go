package native

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/tandem-serve/tandem/engine"
)

// After completed, cancelled, closed and preempted sequences, and exports and
// imports, every block is free or cached again, and preempted sequences still
// produced exactly what they would have alone.
func TestPoolDrainsAfterMixedRequests(t *testing.T) {
	const n = 6
	reqs := make([]engine.Request, n)
	want := make([][]uint32, n)
	ref := newTestEngine(t, Config{})
	for i := range reqs {
		reqs[i] = engine.Request{Prompt: testPrompt(20+5*i, uint32(40+i)), MaxTokens: 40}
		if i%2 == 1 {
			reqs[i].Sampling = sampled(uint64(i))
		}
		want[i], _ = generate(t, ref, reqs[i])
	}

	// 12 blocks hold 192 tokens; the six sequences want about 30 blocks.
	e := newTestEngine(t, Config{NumBlocks: 12, MaxBatchTokens: 32})
	ctx := context.Background()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i, r := range reqs {
		rctx := ctx
		if i == 4 {
			rctx = cctx
		}
		st, err := e.Generate(rctx, r)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var got []uint32
			for {
				tok, err := st.Next(ctx)
				if err != nil {
					switch {
					case i == 4 && errors.Is(err, context.Canceled):
					case i == 4 || i == 5:
						t.Errorf("request %d: %v", i, err)
					case st.Finish() != engine.FinishLength || !slices.Equal(got, want[i]):
						t.Errorf("request %d: %v (%v), want %v", i, got, st.Finish(), want[i])
					}
					return
				}
				got = append(got, tok)
				if i == 4 && len(got) == 3 {
					cancel()
				}
				if i == 5 && len(got) == 2 {
					st.Close()
					if st.Finish() != engine.FinishCancelled {
						t.Errorf("closed stream finished %v", st.Finish())
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	if e.Preemptions() == 0 {
		t.Error("the pool never ran out: the test does not exercise preemption")
	}

	// An export pins its blocks until released; an aborted import frees its own.
	x, err := e.Prefill(ctx, engine.Request{Prompt: testPrompt(40, 50)})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.Stats().ActiveBlocks; got != 3 {
		t.Fatalf("export holds %d blocks, want 3", got)
	}
	im, err := e.Import(ctx, engine.Request{Prompt: testPrompt(30, 51)},
		engine.ImportSpec{NumBlocks: 2, Layout: e.Info().Layout})
	if err != nil {
		t.Fatal(err)
	}
	x.Release()
	im.Abort()
	s := e.Stats()
	if s.ActiveBlocks != 0 || s.FreeBlocks+s.CachedBlocks != s.TotalBlocks {
		t.Fatalf("after everything ended: %+v", s)
	}
	for s.Running+s.Waiting != 0 {
		runtime.Gosched() // the scheduler publishes its counts after its step
		s = e.Stats()
	}
}

func TestCloseEndsStreams(t *testing.T) {
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.Generate(context.Background(), engine.Request{Prompt: testPrompt(10, 60)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.Close()
	for {
		if _, err := st.Next(context.Background()); err != nil {
			if !errors.Is(err, engine.ErrClosed) {
				t.Fatalf("after Close: %v", err)
			}
			break
		}
	}
	if s := e.Stats(); s.ActiveBlocks != 0 {
		t.Fatalf("after Close: %+v", s)
	}
	if _, err := e.Generate(context.Background(), engine.Request{Prompt: testPrompt(10, 60)}); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Generate after Close: %v", err)
	}
}
