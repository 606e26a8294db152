package sim

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/engine"
)

// fakeClock is modelled time: a sleep moves it on at once and is remembered.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	slept []time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.slept = append(c.slept, d)
	return ctx.Err()
}

// roundProfile has figures a reader can check by hand: a decode step is 10 ms
// whatever the KV, a prefill 5 ms plus 0.01 ms a token.
func roundProfile(budget int) Profile {
	return Profile{Name: "round", PrefillB: 0.01, PrefillC: 5, DecodeC: 10,
		KVBytesPerToken: 1 << 17, KVTokens: 1 << 20, MaxNumSeqs: 256, MaxBatchedTokens: budget}
}

// steppedEngine is an engine whose device the test steps itself, in modelled time.
func steppedEngine(t *testing.T, p Profile) (*Engine, *fakeClock) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Profile, cfg.NumBlocks = p, p.KVTokens/cfg.BlockSize
	clock := &fakeClock{now: time.Unix(0, 0)}
	cfg.Clock = clock
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.dev.manual = true
	t.Cleanup(func() { _ = e.Close() })
	return e, clock
}

func testPrompt(n, salt int) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = uint32(i*31 + salt*7919 + 5)
	}
	return p
}

func start(t *testing.T, e *Engine, n, salt, maxTokens int) *seq {
	t.Helper()
	s, err := e.Generate(context.Background(), engine.Request{Prompt: testPrompt(n, salt), MaxTokens: maxTokens})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s.(*seq)
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9*max(1, math.Abs(b)) }

// A long prompt prefilled beside running decodes stretches every one of their
// inter-token gaps for as many steps as its chunks take, by the modelled step time.
func TestLongPrefillStretchesITL(t *testing.T) {
	const budget, decoders, long = 2048, 4, 6000
	p := roundProfile(budget)
	e, _ := steppedEngine(t, p)
	var ds []*seq
	for i := range decoders {
		ds = append(ds, start(t, e, 32, i, 1000))
	}
	// One step prefills the four short prompts together, each draws its first token.
	st, _ := e.dev.stepOnce()
	if st.Prefills != decoders || st.Decode != 0 || !near(st.MS, 5+0.01*32*decoders) {
		t.Fatalf("first step %+v, want the %d prompts in %.2f ms", st, decoders, 5+0.01*32*decoders)
	}
	// Decoding alone: 10 ms a token.
	for range 3 {
		if st, _ = e.dev.stepOnce(); st.Decode != decoders || st.Prefill != 0 || !near(st.MS, 10) {
			t.Fatalf("decode-only step %+v, want %d decodes in 10 ms", st, decoders)
		}
	}
	before := ds[0].produced
	l := start(t, e, long, 99, 10)
	// Each step's budget is shared: a token per decoder, the rest to the prompt.
	chunk := budget - decoders
	steps := (long + chunk - 1) / chunk
	var stretched float64
	for i := range steps {
		st, _ = e.dev.stepOnce()
		want := min(chunk, long-i*chunk)
		if st.Prefill != want || st.Decode != decoders {
			t.Fatalf("step %d of the long prefill: %+v, want %d prompt tokens beside %d decodes", i, st, want, decoders)
		}
		// The step's fixed cost once (max(10, 5)), plus the chunk's tokens.
		if wantMS := 10 + 0.01*float64(want); !near(st.MS, wantMS) {
			t.Fatalf("step %d took %.3f ms, want %.3f", i, st.MS, wantMS)
		}
		stretched += st.MS
	}
	for _, d := range ds {
		if got := d.produced - before; got != steps {
			t.Errorf("a decoder drew %d tokens over the %d steps of the prefill, want one a step", got, steps)
		}
	}
	// Every gap of those steps is stretched by the prefill's share of the step:
	// 6000 tokens at 0.01 ms spread over 3 steps, about 3x the 10 ms alone.
	if want := float64(steps)*10 + 0.01*long; !near(stretched, want) || stretched/float64(steps)/10 < 2.9 {
		t.Errorf("the decoders' gaps beside the prefill sum to %.2f ms (%.2fx alone), want %.2f", stretched, stretched/float64(steps)/10, want)
	}
	if l.produced != 1 || !l.decoding {
		t.Errorf("the long prompt drew %d tokens after its last chunk, want its first", l.produced)
	}
	// And then the gaps are 10 ms again (five decoders now).
	if st, _ = e.dev.stepOnce(); st.Decode != decoders+1 || !near(st.MS, 10) {
		t.Errorf("after the prefill: %+v", st)
	}
}

// The token budget caps a step, decodes count against it, and prompts are served
// first come first served, a prompt that does not fit chunked.
func TestTokenBudgetCapsStep(t *testing.T) {
	const budget = 512
	e, _ := steppedEngine(t, roundProfile(budget))
	a := start(t, e, 300, 1, 50)
	b := start(t, e, 300, 2, 50)
	c := start(t, e, 600, 3, 50)
	st, _ := e.dev.stepOnce()
	if st.Prefill != budget || st.Prefills != 2 {
		t.Fatalf("step 1: %+v, want a's 300 tokens and 212 of b's", st)
	}
	if !a.decoding || b.decoding || b.prefillLeft != 88 || c.prefillDone != 0 {
		t.Fatalf("after step 1: a decoding %v, b left %d, c done %d", a.decoding, b.prefillLeft, c.prefillDone)
	}
	if r := e.Stats(); r.Running != 2 || r.Waiting != 1 || r.WaitingTokens != 88+600 {
		t.Errorf("stats after step 1: %+v, want 2 running (a decoding, b part-prefilled), 1 waiting, 688 tokens to prefill", r)
	}
	st, _ = e.dev.stepOnce()
	// a decodes (1 token of budget), b's last 88, then 423 of c's.
	if st.Decode != 1 || st.Prefill != budget-1 || st.Prefills != 2 || c.prefillLeft != 600-(budget-1-88) {
		t.Fatalf("step 2: %+v, c left %d", st, c.prefillLeft)
	}
	for i := 0; ; i++ {
		st, ok := e.dev.stepOnce()
		if !ok {
			break
		}
		if st.Decode+st.Prefill > budget {
			t.Fatalf("step %d holds %d tokens, over the budget of %d", i, st.Decode+st.Prefill, budget)
		}
	}
	for _, s := range []*seq{a, b, c} {
		if s.produced != 50 || s.finish != engine.FinishLength {
			t.Errorf("a sequence drew %d tokens finishing %v, want 50 and length", s.produced, s.finish)
		}
	}
}

// At most MaxNumSeqs run: a prompt waits for a slot even with budget to spare.
func TestMaxNumSeqs(t *testing.T) {
	p := roundProfile(4096)
	p.MaxNumSeqs = 2
	e, _ := steppedEngine(t, p)
	start(t, e, 20, 1, 5)
	start(t, e, 20, 2, 5)
	third := start(t, e, 20, 3, 5)
	if st, _ := e.dev.stepOnce(); st.Prefills != 2 {
		t.Fatalf("first step prefilled %d prompts, want 2 (the slots)", st.Prefills)
	}
	for range 4 { // the two draw tokens 2 to 5, the last ending them
		if e.dev.stepOnce(); third.prefillDone != 0 {
			t.Fatal("a third prompt started while two sequences held both slots")
		}
	}
	if st, _ := e.dev.stepOnce(); st.Prefills != 1 || third.prefillLeft != 0 {
		t.Fatalf("after the slots freed: %+v", st)
	}
}

// A remote prefill's KV lands after the link's latency plus its bytes over the
// link's bandwidth, counting only the blocks that move.
func TestTransferTime(t *testing.T) {
	p := roundProfile(8192)
	link := Link{Name: "test", LatencyMS: 2, Bandwidth: 1e9}
	if got, want := link.TransferMS(1000, p.KVBytesPerToken), 2+1000*131072/1e9*1e3; !near(got, want) {
		t.Fatalf("TransferMS(1000) = %.3f, want %.3f", got, want)
	}
	src, _ := steppedEngine(t, p)
	src.dev.manual = false
	for _, tc := range []struct{ prompt, skip int }{{1000, 0}, {2000, 0}, {2000, 10}} {
		dst, clock := steppedEngine(t, p)
		dst.cfg.Link = link
		req := engine.Request{Prompt: testPrompt(tc.prompt, tc.skip), MaxTokens: 3}
		if tc.skip > 0 { // the decode side holds the first blocks already
			s := start(t, dst, tc.skip*dst.cfg.BlockSize+1, tc.skip, 1)
			s.req.Prompt = req.Prompt[:tc.skip*dst.cfg.BlockSize+1]
			dst.dev.mu.Lock()
			dst.storePrompt(&seqBlocks{ids: s.blocks.ids, hashes: s.blocks.hashes})
			dst.dev.mu.Unlock()
		}
		exp, err := src.Prefill(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		imp, err := dst.Import(context.Background(), req, engine.ImportSpec{FirstToken: exp.FirstToken(), NumBlocks: exp.NumBlocks(),
			SkipBlocks: tc.skip, Layout: dst.Info().Layout})
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		for i := tc.skip; i < exp.NumBlocks(); i++ {
			b, _ := exp.AppendBlock(nil, i)
			if err := imp.WriteBlock(i, b); err != nil {
				t.Fatal(err)
			}
		}
		exp.Release()
		moved := tc.prompt - tc.skip*dst.cfg.BlockSize
		want := time.Duration((2 + float64(moved)*131072/1e9*1e3) * float64(time.Millisecond))
		if len(clock.slept) != 1 || clock.slept[0] != want {
			t.Errorf("%+v: the import waited %v, want %v (2 ms + %d tokens x 128 KiB at 1 GB/s)", tc, clock.slept, want, moved)
		}
		s, err := imp.Commit(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if tok, err := s.Next(context.Background()); err != nil || tok != exp.FirstToken() {
			t.Errorf("first token after the import: %d, %v; want %d", tok, err, exp.FirstToken())
		}
		s.Close()
	}
}

// Unstepped, the device's goroutine sleeps each step's modelled time on its clock,
// scaled, and a prefill-only device batches the prefills waiting under its budget.
func TestLoopSleepsModelledTime(t *testing.T) {
	p := roundProfile(4096)
	cfg := DefaultConfig()
	cfg.Profile, cfg.TimeScale = p, 0.5
	clock := &fakeClock{now: time.Unix(0, 0)}
	var mu sync.Mutex
	var steps []Step
	cfg.Clock, cfg.OnStep = clock, func(st Step) { mu.Lock(); steps = append(steps, st); mu.Unlock() }
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	// Hold the device back so that both prefills are waiting when it starts.
	e.dev.manual = true
	e.dev.mu.Lock()
	type res struct {
		exp engine.Export
		err error
	}
	out := make(chan res, 2)
	for i := range 2 {
		go func() {
			x, err := e.Prefill(context.Background(), engine.Request{Prompt: testPrompt(1000, i)})
			out <- res{x, err}
		}()
	}
	for e.dev.queued() < 2 {
		e.dev.mu.Unlock()
		time.Sleep(time.Millisecond)
		e.dev.mu.Lock()
	}
	e.dev.mu.Unlock()
	// The queue a prefill worker reports, which the router and the decode policies see.
	if st := e.Stats(); st.Waiting != 2 || st.Running != 0 || st.WaitingTokens != 2000 {
		t.Errorf("two prompts of 1000 queued: %+v", st)
	}
	e.dev.mu.Lock()
	e.dev.manual = false
	e.dev.startLocked()
	e.dev.mu.Unlock()
	for range 2 {
		r := <-out
		if r.err != nil {
			t.Fatal(r.err)
		}
		// Batched in one step of 5 + 20 ms, at half scale.
		if r.exp.QueueTime() != 0 || r.exp.PrefillTime() != 12500*time.Microsecond {
			t.Errorf("queue %v, prefill %v; want 0 and 12.5ms (one 25 ms step for both, at half scale)", r.exp.QueueTime(), r.exp.PrefillTime())
		}
		r.exp.Release()
	}
	// OnStep runs after the step is applied, so a prefill may return before it.
	mu.Lock()
	defer mu.Unlock()
	for deadline := time.Now().Add(10 * time.Second); len(steps) == 0 && time.Now().Before(deadline); {
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
	}
	if len(steps) != 1 || steps[0].Prefill != 2000 || steps[0].Prefills != 2 {
		t.Errorf("steps %+v, want one of both prompts", steps)
	}
}
