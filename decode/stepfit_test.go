package decode

import (
	"math"
	"math/rand/v2"
	"strings"
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
	var f stepFit
	if g := f.project(32, 2048, 0, 0.3); g.ok {
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
		f.observe(engine.StepReport{Seconds: truth(decode, prefill, pairs, u) * noise, Decode: decode,
			PrefillTokens: prefill, PrefillPairs: pairs, KVUsage: u})
	}
	for _, c := range []struct{ batch, chunk, ctx int }{{64, 1984, 0}, {64, 1984, 30000}, {200, 1848, 4000}} {
		g := f.project(c.batch, c.chunk, c.ctx, 0.5)
		if !g.ok {
			t.Fatalf("warm fit not ok: %+v", g)
		}
		wantPlain, wantGap := truth(c.batch, 0, 0, 0.5), truth(c.batch, c.chunk, engine.ChunkPairs(c.ctx, c.chunk), 0.5)
		if math.Abs(g.plain/wantPlain-1) > 0.1 || math.Abs(g.gap/wantGap-1) > 0.05 {
			t.Errorf("%+v: projected plain %.2fms, gap %.2fms; want %.2fms, %.2fms", c, g.plain*1e3, g.gap*1e3, wantPlain*1e3, wantGap*1e3)
		}
	}
}

// Steps that never held a prompt say nothing of what a chunk costs: the fit
// does not project one (the ridge would shrink the chunk's terms to nothing and
// call a stretched step plain).
func TestStepFitNeedsChunksToProjectOne(t *testing.T) {
	var f stepFit
	for i := range 200 {
		f.observe(engine.StepReport{Seconds: 0.01 + 1e-5*float64(i%50), Decode: 1 + i%50, KVUsage: 0.1})
	}
	if g := f.project(32, 2048, 0, 0.1); g.ok {
		t.Fatalf("projected a stretched step from plain ones only: %+v", g)
	}
	// Nonsense reports are dropped, not learnt.
	for _, r := range []engine.StepReport{{Seconds: math.NaN(), Decode: 1}, {Seconds: -1, Decode: 1}, {Seconds: math.Inf(1), Decode: 1},
		{Seconds: 1, Decode: -1}, {Seconds: 1, PrefillTokens: 5, PrefillPairs: math.NaN()}} {
		before := f.total
		f.observe(r)
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
	var f stepFit
	for i := range 300 {
		decode := 20 + i%30
		f.observe(engine.StepReport{Seconds: 0.07 + 1e-5*float64(decode), Decode: decode, PrefillTokens: 2048 - decode,
			PrefillPairs: engine.ChunkPairs(0, 2048-decode), KVUsage: 0.2})
	}
	g := f.project(40, 2008, 0, 0.2)
	if !g.ok || g.plainOK {
		t.Fatalf("full steps only: %+v, want the stretched step and no plain one", g)
	}
	if want := 0.07 + 40e-5; math.Abs(g.gap/want-1) > 0.05 {
		t.Errorf("full step projected %.2fms, want about %.2fms", g.gap*1e3, want*1e3)
	}
	if small := f.project(40, 100, 0, 0.2); math.Abs(small.gap/g.gap-1) > 0.05 {
		t.Errorf("a 100-token chunk projected %.2fms: below the smallest chunk seen, want it taken as that (%.2fms)", small.gap*1e3, g.gap*1e3)
	}
}

// A worker that never stops prefilling: every gap its streams saw (70 ms) was a
// step with a chunk beside the batch, so the gaps' "plain" step is a stretched
// one, and adding the prompt's compute to it counts the chunk twice: 125 ms a
// step, a projected TBT past 80 % of 100 ms, remote. The engine's steps, fitted,
// say a step with this chunk takes 72 ms: local.
func TestSLOTBTTakesTheFittedStep(t *testing.T) {
	decideFit := func(fit stepGuess) (choice, slack) {
		w := newTBTWorker(t)
		w.decoding(65, gaps(20, 70)...)
		p := Params{Policy: PolicySLO, ThresholdParams: ThresholdParams{ShortPrefillThreshold: 64}, SLOParams: SLOParams{TTFTSLOMs: 30000, TBTSLOMs: 100}}
		est := Estimate{Warm: true, LocalWarm: true, RemoteWarm: true, Local: 0.14, LocalPrefill: 0.14, Remote: 1, Chunk: 2048}
		s := situation{prompt: 4096, est: est}
		s.slack = w.ss.slack(w.now, p.TTFTSLOMs/1e3, 0, p.TBTSLOMs/1e3, 0.01, stretch{steps: 2, stall: 0.14, compute: 0.11,
			plain: stepAt{seconds: 0.07, batch: 2, learned: true, from: "bucket"}, fit: fit})
		return decide(p, s), s.slack
	}
	c, _ := decideFit(stepGuess{})
	wantChoice(t, "gaps only", c, true, "slo_remote_tbt_budget")
	c, sl := decideFit(stepGuess{ok: true, gap: 0.072, chunk: 2046, batch: 2, reports: 900})
	wantChoice(t, "with the engine's steps", c, false, "slo_local_fits")
	if sl.gap != 0.072 || sl.step != 0.07 || !strings.Contains(c.detail, "fitted to the engine's last 512 steps") {
		t.Errorf("stretched %.1fms, plain %.1fms, detail %q: want the fit's 72 ms, the gaps' 70 ms capped by it, and the fit named",
			sl.gap*1e3, sl.step*1e3, c.detail)
	}
}
