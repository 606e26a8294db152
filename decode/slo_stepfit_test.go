package decode

import (
	"github.com/tandem-serve/tandem/decode/estimate"

	"strings"
	"testing"
)

// A worker that never stops prefilling: every gap its streams saw (70 ms) was a
// step with a chunk beside the batch, so the gaps' "plain" step is a stretched
// one, and adding the prompt's compute to it counts the chunk twice: 125 ms a
// step, a projected TBT past 80 % of 100 ms, remote. The engine's steps, fitted,
// say a step with this chunk takes 72 ms: local.
func TestSLOTBTTakesTheFittedStep(t *testing.T) {
	decideFit := func(fit estimate.StepGuess) (choice, estimate.Slack) {
		w := newTBTWorker(t)
		w.decoding(65, gaps(20, 70)...)
		p := Params{Policy: PolicySLO, ThresholdParams: ThresholdParams{ShortPrefillThreshold: 64}, SLOParams: SLOParams{TTFTSLOMs: 30000, TBTSLOMs: 100}}
		est := estimate.Estimate{Warm: true, LocalWarm: true, RemoteWarm: true, Local: 0.14, LocalPrefill: 0.14, Remote: 1, Chunk: 2048}
		s := situation{prompt: 4096, est: est}
		s.slack = w.ss.Slack(w.now, p.TTFTSLOMs/1e3, 0, p.TBTSLOMs/1e3, 0.01, estimate.Stretch{Steps: 2, Stall: 0.14, Compute: 0.11,
			Plain: estimate.StepAt{Seconds: 0.07, Batch: 2, Learned: true, From: "bucket"}, Fit: fit})
		return decide(p, s), s.slack
	}
	c, _ := decideFit(estimate.StepGuess{})
	wantChoice(t, "gaps only", c, true, "slo_remote_tbt_budget")
	c, sl := decideFit(estimate.StepGuess{OK: true, Gap: 0.072, Chunk: 2046, Batch: 2, Reports: 900})
	wantChoice(t, "with the engine's steps", c, false, "slo_local_fits")
	if sl.Gap != 0.072 || sl.Step != 0.07 || !strings.Contains(c.detail, "fitted to the engine's last 512 steps") {
		t.Errorf("stretched %.1fms, plain %.1fms, detail %q: want the fit's 72 ms, the gaps' 70 ms capped by it, and the fit named",
			sl.Gap*1e3, sl.Step*1e3, c.detail)
	}
}
