package native

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/internal/testutil"
	"github.com/tandem-serve/tandem/kvcache"
	"github.com/tandem-serve/tandem/kvcache/blockhash"
)

// transfer moves an export's blocks from skip on into a new sequence on dst.
func transfer(t *testing.T, src, dst *Engine, req engine.Request, skip int) engine.Stream {
	t.Helper()
	ctx := context.Background()
	x, err := src.Prefill(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	im, err := dst.Import(ctx, req, engine.ImportSpec{
		FirstToken: x.FirstToken(), FirstLogprobs: x.FirstLogprobs(), NumBlocks: x.NumBlocks(), SkipBlocks: skip, Layout: src.Info().Layout,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Out of order, as a network might deliver them.
	for i := x.NumBlocks() - 1; i >= skip; i-- {
		b, err := x.AppendBlock(nil, i)
		if err != nil {
			t.Fatal(err)
		}
		if err := im.WriteBlock(i, b); err != nil {
			t.Fatal(err)
		}
	}
	st, err := im.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestExportImportContinuesExactly(t *testing.T) {
	prompt := testPrompt(45, 30)
	for _, sp := range []engine.Sampling{{}, sampled(5)} {
		req := engine.Request{ID: "x", Prompt: prompt, MaxTokens: 20, Sampling: sp}
		want, _ := generate(t, newTestEngine(t, Config{}), req)

		src, dst := newTestEngine(t, Config{}), newTestEngine(t, Config{})
		st := transfer(t, src, dst, req, 0)
		got := testutil.Drain(t, context.Background(), st)
		if !slices.Equal(got, want) {
			t.Fatalf("%+v: imported %v, local %v", sp, got, want)
		}
		if st.Finish() != engine.FinishLength || st.Usage().CompletionTokens != 20 {
			t.Fatalf("finish %v usage %+v", st.Finish(), st.Usage())
		}
		// The imported full blocks are now in dst's prefix cache, announced as events.
		if got := dst.CachedPrefix(prompt); got != 32 {
			t.Fatalf("CachedPrefix after import = %d, want 32", got)
		}
		evs, _, _ := dst.Events().Since(0)
		hashes := blockhash.Hash(prompt, 16)
		if len(evs) == 0 || evs[0].Kind != kvcache.Stored || !slices.Equal(evs[0].Hashes, hashes) {
			t.Fatalf("dst events %+v, want Stored %x first", evs, hashes)
		}
		waitIdle(t, dst)
	}
}

func TestImportWithSkippedBlocks(t *testing.T) {
	shared := testPrompt(40, 31)
	prompt := append(slices.Clone(shared[:32]), testPrompt(20, 32)...)
	req := engine.Request{Prompt: prompt, MaxTokens: 15, Sampling: sampled(2)}
	want, _ := generate(t, newTestEngine(t, Config{}), req)

	src, dst := newTestEngine(t, Config{}), newTestEngine(t, Config{})
	generate(t, dst, engine.Request{Prompt: shared, MaxTokens: 2})
	skip := dst.CachedPrefix(prompt) / 16
	if skip != 2 {
		t.Fatalf("dst caches %d blocks of the prefix, want 2", skip)
	}
	st := transfer(t, src, dst, req, skip)
	if got := testutil.Drain(t, context.Background(), st); !slices.Equal(got, want) {
		t.Fatalf("imported with skip %d: %v, local %v", skip, got, want)
	}
	if st.Usage().CachedTokens != 32 {
		t.Fatalf("usage %+v", st.Usage())
	}
	waitIdle(t, dst)
}

func TestImportRefusals(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, Config{})
	req := engine.Request{Prompt: testPrompt(20, 33)}
	spec := engine.ImportSpec{NumBlocks: 2, Layout: e.Info().Layout}

	bad := spec
	bad.Layout.Fingerprint = "other"
	if _, err := e.Import(ctx, req, bad); !errors.Is(err, engine.ErrLayoutMismatch) {
		t.Fatalf("foreign weights: %v", err)
	}
	bad = spec
	bad.SkipBlocks = 1
	if _, err := e.Import(ctx, req, bad); !errors.Is(err, ErrNotCached) {
		t.Fatalf("skip of an uncached block: %v", err)
	}
	im, err := e.Import(ctx, req, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := im.WriteBlock(0, make([]byte, 10)); !errors.Is(err, engine.ErrBadBlock) {
		t.Fatalf("short block: %v", err)
	}
	if _, err := im.Commit(ctx); !errors.Is(err, engine.ErrBadBlock) {
		t.Fatalf("commit with missing blocks: %v", err)
	}
	if e.Stats().ActiveBlocks != 2 {
		t.Fatalf("import holds %d blocks, want 2", e.Stats().ActiveBlocks)
	}
	im.Abort()
	im.Abort()
	waitIdle(t, e)

	// A cancelled import context frees the blocks too.
	cctx, cancel := context.WithCancel(ctx)
	if _, err := e.Import(cctx, req, spec); err != nil {
		t.Fatal(err)
	}
	cancel()
	for e.Stats().ActiveBlocks != 0 {
		runtime.Gosched() // AfterFunc frees on its own goroutine
	}
}

// An import that finds the pool full waits for blocks, as a local request does,
// rather than failing at once (its KV is already computed on the prefill worker),
// for as long as its spec allows.
func TestImportWaitsForBlocks(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, Config{NumBlocks: 8})
	layout := e.Info().Layout
	bs := layout.BlockSize
	big := engine.Request{Prompt: testPrompt(6*bs, 1)}
	holder, err := e.Import(ctx, big, engine.ImportSpec{NumBlocks: 6, Layout: layout})
	if err != nil {
		t.Fatal(err)
	}
	small := engine.Request{Prompt: testPrompt(4*bs, 2)}
	for _, wait := range []time.Duration{0, 20 * time.Millisecond} {
		spec := engine.ImportSpec{NumBlocks: 4, Layout: layout, BlockWait: wait}
		if _, err := e.Import(ctx, small, spec); !errors.Is(err, engine.ErrNoBlocks) {
			t.Fatalf("import into a full pool, waiting %v: %v, want ErrNoBlocks", wait, err)
		}
	}
	// A wait its context cuts short found no lack of blocks: it says what
	// ended it, and how many blocks it waited for.
	dctx, cancelD := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancelD()
	_, err = e.Import(dctx, small, engine.ImportSpec{NumBlocks: 4, Layout: layout, BlockWait: time.Minute})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, engine.ErrNoBlocks) || !strings.Contains(err.Error(), "4 free KV blocks") {
		t.Fatalf("import whose deadline passed while it waited: %v, want DeadlineExceeded naming the 4 blocks, not ErrNoBlocks", err)
	}
	cctx, cancelC := context.WithCancel(ctx)
	cut := make(chan error, 1)
	go func() {
		_, err := e.Import(cctx, small, engine.ImportSpec{NumBlocks: 4, Layout: layout, BlockWait: time.Minute})
		cut <- err
	}()
	for e.importWaiters.Load() == 0 {
		select {
		case err := <-cut:
			t.Fatalf("import into a full pool returned %v instead of waiting", err)
		case <-time.After(time.Millisecond):
		}
	}
	cancelC()
	if err := <-cut; !errors.Is(err, context.Canceled) || errors.Is(err, engine.ErrNoBlocks) {
		t.Fatalf("import cancelled while it waited: %v, want Canceled, not ErrNoBlocks", err)
	}

	got := make(chan error, 1)
	go func() {
		im, err := e.Import(ctx, small, engine.ImportSpec{NumBlocks: 4, Layout: layout, BlockWait: time.Minute})
		if err == nil {
			im.Abort()
		}
		got <- err
	}()
	for e.importWaiters.Load() == 0 {
		select {
		case err := <-got:
			t.Fatalf("import into a full pool returned %v instead of waiting", err)
		case <-time.After(time.Millisecond):
		}
	}
	holder.Abort() // 6 blocks come free
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("import once blocks came free: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("import still waiting after blocks came free")
	}
	waitIdle(t, e)
}
