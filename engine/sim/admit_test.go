package sim_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/sim"
	"github.com/tandem-serve/tandem/engine/sim/simtest"
	"github.com/tandem-serve/tandem/internal/testutil"
	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
)

// salted is a prompt of n tokens sharing no block with prompt(n) or another salt.
func salted(n int, salt uint32) []uint32 {
	p := prompt(n)
	for i := range p {
		p[i] += 1000 * salt
	}
	return p
}

// nextErr is the error a stream ends with, reading past its tokens.
func nextErr(t *testing.T, s engine.Stream) error {
	t.Helper()
	for range 1000 {
		if _, err := s.Next(rpctest.Context(t)); err != nil {
			return err
		}
	}
	t.Fatal("stream did not end")
	return nil
}

// A request whose blocks are not free waits for them, in arrival order, counted
// as waiting, and runs once they come free; only one that could never fit the
// pool fails at once. Without the admission queue the second Generate failed with
// ErrNoBlocks.
func TestShortPoolQueues(t *testing.T) {
	e := simtest.New(t, func(c *sim.Config) { c.NumBlocks = 10 })
	// 40 prompt + 8 output = 3 blocks held; the reader holds it back (time scale 0).
	first, err := e.Generate(rpctest.Context(t), engine.Request{Prompt: salted(40, 1), MaxTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(first.Close)
	if _, err := first.Next(rpctest.Context(t)); err != nil { // prefilled: no longer waiting
		t.Fatal(err)
	}
	// 100 + 20 = 8 blocks, 7 free: it waits.
	big, err := e.Generate(rpctest.Context(t), engine.Request{Prompt: salted(100, 2), MaxTokens: 20})
	if err != nil {
		t.Fatalf("8 blocks with 7 free: %v, want it queued", err)
	}
	t.Cleanup(big.Close)
	// 20 + 4 = 2 blocks would fit, but it arrived after the one waiting: first come,
	// first served.
	small, err := e.Generate(rpctest.Context(t), engine.Request{Prompt: salted(20, 3), MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(small.Close)
	if st := e.Stats(); st.Waiting != 2 || st.WaitingTokens != 120 || st.ActiveBlocks != 3 {
		t.Errorf("two queued behind a 3-block sequence: %+v, want 2 waiting with 120 tokens, 3 blocks active", st)
	}
	if _, err := e.Generate(rpctest.Context(t), engine.Request{Prompt: salted(100, 4), MaxTokens: 100}); !errors.Is(err, engine.ErrNoBlocks) {
		t.Errorf("13 blocks from a pool of 10: %v, want ErrNoBlocks at once", err)
	}
	want, _ := generate(t, simtest.New(t, nil), engine.Request{Prompt: salted(100, 2), MaxTokens: 20})
	testutil.Drain(t, rpctest.Context(t), first) // its blocks free: both waiting get theirs, in order
	if got := testutil.Drain(t, rpctest.Context(t), big); !slices.Equal(got, want) {
		t.Errorf("the queued request decoded %v, want %v", got, want)
	}
	if n := len(testutil.Drain(t, rpctest.Context(t), small)); n != 4 {
		t.Errorf("the small request drew %d tokens, want 4", n)
	}
	if st := e.Stats(); st.Waiting != 0 || st.ActiveBlocks != 0 || st.PrefixQueryTokens != 160 {
		t.Errorf("after all three: %+v", st)
	}
}

// A request cancelled while it waits leaves the queue and lets those behind it
// in; the engine's close ends the ones still waiting with ErrClosed.
func TestQueuedCancelAndClose(t *testing.T) {
	e := simtest.New(t, func(c *sim.Config) { c.NumBlocks = 10 })
	holder, err := e.Generate(rpctest.Context(t), engine.Request{Prompt: salted(40, 1), MaxTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(holder.Close)
	if _, err := holder.Next(rpctest.Context(t)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(rpctest.Context(t))
	big, err := e.Generate(ctx, engine.Request{Prompt: salted(100, 2), MaxTokens: 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(big.Close)
	small, err := e.Generate(rpctest.Context(t), engine.Request{Prompt: salted(20, 3), MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(small.Close)
	cancel()
	if err := nextErr(t, big); !errors.Is(err, context.Canceled) || big.Finish() != engine.FinishCancelled {
		t.Errorf("cancelled while queued: %v, %v", err, big.Finish())
	}
	if u := big.Usage(); u.CompletionTokens != 0 || u.CachedTokens != 0 {
		t.Errorf("usage of a request never admitted: %+v", u)
	}
	// The head left: the small one behind it fits beside the holder.
	if n := len(testutil.Drain(t, rpctest.Context(t), small)); n != 4 {
		t.Errorf("the request behind the cancelled one drew %d tokens, want 4", n)
	}
	last, err := e.Generate(rpctest.Context(t), engine.Request{Prompt: salted(100, 4), MaxTokens: 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(last.Close)
	if st := e.Stats(); st.Waiting != 1 {
		t.Fatalf("stats with one queued: %+v", st)
	}
	_ = e.Close()
	if err := nextErr(t, last); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("queued at close: %v, want ErrClosed", err)
	}
}

// A prefill worker's pool short of blocks queues its prefills too.
func TestPrefillQueues(t *testing.T) {
	e := simtest.New(t, func(c *sim.Config) { c.NumBlocks = 4 })
	a, err := e.Prefill(rpctest.Context(t), engine.Request{Prompt: salted(60, 1)}) // 4 blocks, kept exported
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		x, err := e.Prefill(rpctest.Context(t), engine.Request{Prompt: salted(30, 2)})
		if err == nil {
			x.Release()
		}
		done <- err
	}()
	testutil.WaitFor(t, "the condition", func() bool { return e.Stats().Waiting == 1 })
	if st := e.Stats(); st.WaitingTokens != 30 {
		t.Errorf("one 30-token prompt waiting for blocks: %+v", st)
	}
	a.Release()
	if err := <-done; err != nil {
		t.Errorf("queued prefill: %v", err)
	}
}

// An import short of blocks waits for at most its BlockWait, in the same queue,
// and fails with ErrNoBlocks after it (or at once with none), freeing the skip
// blocks it pinned; blocks coming free in time let it in.
func TestImportWaitsForBlocks(t *testing.T) {
	src := simtest.New(t, nil)
	dst := simtest.New(t, func(c *sim.Config) { c.NumBlocks = 6 })
	p := salted(40, 1)
	req := engine.Request{Prompt: p, MaxTokens: 8} // 3 blocks
	exp, err := src.Prefill(rpctest.Context(t), engine.Request{Prompt: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(exp.Release)
	spec := engine.ImportSpec{FirstToken: exp.FirstToken(), NumBlocks: exp.NumBlocks(), Layout: dst.Info().Layout}
	holder, err := dst.Generate(rpctest.Context(t), engine.Request{Prompt: salted(60, 2), MaxTokens: 8}) // 5 blocks
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(holder.Close)
	if _, err := holder.Next(rpctest.Context(t)); err != nil { // prefilled: not waiting
		t.Fatal(err)
	}

	if _, err := dst.Import(rpctest.Context(t), req, spec); !errors.Is(err, engine.ErrNoBlocks) {
		t.Errorf("no BlockWait, 1 block free: %v, want ErrNoBlocks at once", err)
	}
	short := spec
	short.BlockWait = 20 * time.Millisecond
	if _, err := dst.Import(rpctest.Context(t), req, short); !errors.Is(err, engine.ErrNoBlocks) {
		t.Errorf("nothing freed within BlockWait: %v, want ErrNoBlocks", err)
	}
	ctx, cancel := context.WithCancel(rpctest.Context(t))
	cancel()
	if _, err := dst.Import(ctx, req, short); !errors.Is(err, engine.ErrNoBlocks) {
		t.Errorf("cancelled import: %v, want ErrNoBlocks", err)
	}
	if st := dst.Stats(); st.Waiting != 0 || st.ActiveBlocks != 5 {
		t.Errorf("after the failed imports: %+v, want none waiting and only the holder's 5 blocks", st)
	}

	long := spec
	long.BlockWait = time.Minute
	type res struct {
		imp engine.Importer
		err error
	}
	out := make(chan res, 1)
	go func() {
		imp, err := dst.Import(rpctest.Context(t), req, long)
		out <- res{imp, err}
	}()
	testutil.WaitFor(t, "the condition", func() bool { return dst.Stats().Waiting == 1 })
	testutil.Drain(t, rpctest.Context(t), holder)
	r := <-out
	if r.err != nil {
		t.Fatalf("import once blocks came free: %v", r.err)
	}
	for i := range exp.NumBlocks() {
		b, _ := exp.AppendBlock(nil, i)
		if err := r.imp.WriteBlock(i, b); err != nil {
			t.Fatal(err)
		}
	}
	s, err := r.imp.Commit(rpctest.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	want, _ := generate(t, simtest.New(t, nil), req)
	if got := testutil.Drain(t, rpctest.Context(t), s); !slices.Equal(got, want) {
		t.Errorf("imported after waiting: %v, want %v", got, want)
	}

	// The engine closing ends an import's wait.
	holder2, err := dst.Generate(rpctest.Context(t), engine.Request{Prompt: salted(60, 3), MaxTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(holder2.Close)
	if _, err := holder2.Next(rpctest.Context(t)); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := dst.Import(rpctest.Context(t), req, long)
		errc <- err
	}()
	testutil.WaitFor(t, "the condition", func() bool { return dst.Stats().Waiting == 1 })
	_ = dst.Close()
	if err := <-errc; !errors.Is(err, engine.ErrClosed) {
		t.Errorf("import waiting at close: %v, want ErrClosed", err)
	}
}
