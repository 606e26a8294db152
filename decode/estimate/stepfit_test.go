package estimate

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tandem-serve/tandem/engine"
)

// The fit recovers a step time that is linear in its terms, as the sim's is,
// from steps of the mix a busy decode worker runs: every step carrying a chunk
// of some prompt, of varied sizes and depths, and none plain. It must project
// the plain step it never saw, and a deep chunk's.
func TestStepFitRecoversAStepItNeverSaw(t *testing.T) {
	truth := func(decode, prefill int, pairs, u float64) float64 {
		return 0.006 + 2e-5*float64(decode) + 2.7e-5*float64(prefill) + 4.4e-10*2*pairs + 0.03*u
	}
	var f StepFit
	if g := f.Project(32, 2048, 0, 0.3); g.OK {
		t.Fatalf("a fit of nothing projected %+v", g)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 400 {
		decode := 8 + rng.IntN(120)
		prefill := 2048 - decode
		if rng.IntN(4) == 0 {
			prefill = 1 + rng.IntN(prefill) // a prompt's last chunk
		}
		o := rng.IntN(8192)
		u := rng.Float64() * 0.8
		pairs := engine.ChunkPairs(o, prefill)
		noise := 1 + 0.02*(rng.Float64()-0.5)
		f.Observe(engine.StepReport{Seconds: truth(decode, prefill, pairs, u) * noise, Decode: decode,
			PrefillTokens: prefill, PrefillPairs: pairs, KVUsage: u})
	}
	for _, c := range []struct{ batch, chunk, ctx int }{{64, 1984, 0}, {64, 1984, 30000}, {200, 1848, 4000}} {
		g := f.Project(c.batch, c.chunk, c.ctx, 0.5)
		if !g.OK {
			t.Fatalf("warm fit not ok: %+v", g)
		}
		wantPlain, wantGap := truth(c.batch, 0, 0, 0.5), truth(c.batch, c.chunk, engine.ChunkPairs(c.ctx, c.chunk), 0.5)
		if math.Abs(g.Plain/wantPlain-1) > 0.1 || math.Abs(g.Gap/wantGap-1) > 0.05 {
			t.Errorf("%+v: projected plain %.2fms, gap %.2fms; want %.2fms, %.2fms", c, g.Plain*1e3, g.Gap*1e3, wantPlain*1e3, wantGap*1e3)
		}
	}
}

// Steps that never held a prompt say nothing of what a chunk costs: the fit
// does not project one (the ridge would shrink the chunk's terms to nothing and
// call a stretched step plain).
func TestStepFitNeedsChunksToProjectOne(t *testing.T) {
	var f StepFit
	for i := range 200 {
		f.Observe(engine.StepReport{Seconds: 0.01 + 1e-5*float64(i%50), Decode: 1 + i%50, KVUsage: 0.1})
	}
	if g := f.Project(32, 2048, 0, 0.1); g.OK {
		t.Fatalf("projected a stretched step from plain ones only: %+v", g)
	}
	// Nonsense reports are dropped, not learnt.
	for _, r := range []engine.StepReport{{Seconds: math.NaN(), Decode: 1}, {Seconds: -1, Decode: 1}, {Seconds: math.Inf(1), Decode: 1},
		{Seconds: 1, Decode: -1}, {Seconds: 1, PrefillTokens: 5, PrefillPairs: math.NaN()}} {
		before := f.total
		f.Observe(r)
		if f.total != before {
			t.Errorf("report %+v was learnt", r)
		}
	}
}

// A worker that never stops prefilling runs every step with a full chunk: the
// fit knows what such a step costs, not what a plain one does. It projects the
// full step, takes a smaller chunk as the smallest it saw (the line below that
// is a guess), and leaves the plain step to the caller.
func TestStepFitOfFullStepsOnly(t *testing.T) {
	var f StepFit
	for i := range 300 {
		decode := 20 + i%30
		f.Observe(engine.StepReport{Seconds: 0.07 + 1e-5*float64(decode), Decode: decode, PrefillTokens: 2048 - decode,
			PrefillPairs: engine.ChunkPairs(0, 2048-decode), KVUsage: 0.2})
	}
	g := f.Project(40, 2008, 0, 0.2)
	if !g.OK || g.PlainOK {
		t.Fatalf("full steps only: %+v, want the stretched step and no plain one", g)
	}
	if want := 0.07 + 40e-5; math.Abs(g.Gap/want-1) > 0.05 {
		t.Errorf("full step projected %.2fms, want about %.2fms", g.Gap*1e3, want*1e3)
	}
	if small := f.Project(40, 100, 0, 0.2); math.Abs(small.Gap/g.Gap-1) > 0.05 {
		t.Errorf("a 100-token chunk projected %.2fms: below the smallest chunk seen, want it taken as that (%.2fms)", small.Gap*1e3, g.Gap*1e3)
	}
}
