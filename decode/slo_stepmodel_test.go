package decode

import (
	"github.com/tandem-serve/tandem/decode/estimate"

	"math"
	"strings"
	"sync/atomic"
	"testing"
)

func TestSLOTBTProjectionFollowsTheBatch(t *testing.T) {
	var m estimate.StepModel
	for range estimate.StepWindow {
		m.Observe(4, 0.010)
		m.Observe(64, 0.050)
	}
	const compute = 0.36 // 90 ms of the prompt's own a step
	for _, tc := range []struct {
		name   string
		stall  float64 // the line: 10 ms a step + the compute, or more
		plain  estimate.StepAt
		tbt    float64
		remote bool
		reason string
		detail string
	}{
		{"cold", 0.40, estimate.StepAt{Batch: 64}, 0.046, false, "slo_local_fits", "plain step 10.00ms at batch 64 (the decoding sequences' median gap)"},
		{"batch 4", 0.40, m.At(4), 0.046, false, "slo_local_fits", "plain step 10.00ms at batch 4 (learned, bucket) + the prompt's compute"},
		{"batch 64", 0.40, m.At(64), 0.086, true, "slo_remote_tbt_budget", "4 steps of 140.0ms (plain step 50.00ms at batch 64 (learned"},
		// A line above the learned step and the compute is kept: (4·150 + 6·10)/10.
		{"batch 4, the line higher", 0.60, m.At(4), 0.066, false, "slo_local_fits", "4 steps of 150.0ms"},
	} {
		w := newTBTWorker(t)
		w.decoding(101, gaps(40, 10)...)
		c, sl := w.decideWith(8192, tc.stall, compute, tc.plain)
		if !near(math.Round(sl.TBT*1e6)/1e6, tc.tbt) {
			t.Errorf("%s: projected TBT %.3f ms, want %.3f ms", tc.name, sl.TBT*1e3, tc.tbt*1e3)
		}
		wantChoice(t, tc.name, c, tc.remote, tc.reason)
		if !strings.Contains(c.detail, tc.detail) {
			t.Errorf("%s: detail %q, want it to say %q", tc.name, c.detail, tc.detail)
		}
	}
}

func TestOneGapSampledAStepAtABatchAboveTheAnswersLength(t *testing.T) {
	var seq atomic.Uint64
	const batch, tokens = 300, 64
	n := 0
	for range tokens - 1 { // each step: every stream's gap
		for range batch {
			if sampleGap(&seq, batch) {
				n++
			}
		}
	}
	if n != tokens-1 {
		t.Errorf("%d gaps sampled over %d steps of %d streams, want one a step", n, tokens-1, batch)
	}
	if sampleGap(&seq, 0) {
		t.Error("a gap sampled with no batch")
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
