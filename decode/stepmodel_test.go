package decode

import (
	"math"
	"strings"
	"sync/atomic"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// A batch of 64 steps slower than one of 4, and the model says so at each,
// between them and past them; a stretched gap now and then (a prefill chunk
// in the step) does not move a bucket's median.
func TestStepModelLearnsTheBatch(t *testing.T) {
	var m stepModel
	if at := m.at(4); at.learned {
		t.Fatalf("cold model learned %+v", at)
	}
	for i := range stepWindow {
		g := 0.010
		if i%5 == 0 {
			g = 0.090 // a step that carried a prefill chunk
		}
		m.observe(4, g)
	}
	if at := m.at(4); !at.learned || !near(at.seconds, 0.010) || at.batch != 4 {
		t.Errorf("at(4) = %+v, want 10 ms learned", at)
	}
	if at := m.at(64); at.learned {
		t.Errorf("at(64) = %+v with only batch 4 measured: want cold (one bucket says nothing of the slope)", at)
	}
	for range stepWindow {
		m.observe(64, 0.050)
	}
	for _, tc := range []struct {
		batch int
		want  float64
		from  string
	}{
		{4, 0.010, "bucket"},
		{64, 0.050, "interpolated"},
		{16, 0.010 + 0.040*12/60, "interpolated"}, // on the line through (4, 10 ms) and (64, 50 ms)
		{128, 0.050 + 0.040*64/60, "extrapolated"},
		{2, 0.010 - 0.040*2/60, "extrapolated"}, // below every warm bucket: down the same line
	} {
		at := m.at(tc.batch)
		if !at.learned || !near(at.seconds, tc.want) || at.from != tc.from {
			t.Errorf("at(%d) = %+v, want %.2f ms %s", tc.batch, at, tc.want*1e3, tc.from)
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { m.observe(64, 0.05); _ = m.at(16) }); allocs != 0 {
		t.Errorf("%v allocations an observation and a projection, want none", allocs)
	}
}

// The projection follows the batch: the same sequence (101 tokens, 40
// decoded at 10 ms) beside the same prompt (4 steps, 90 ms of compute each)
// projects (4·100 + 6·10)/10 = 46 ms at batch 4, where a plain step is 10 ms,
// and (4·140 + 6·50)/10 = 86 ms at batch 64, where it is 50 ms: past 80 % of
// the 100 ms objective, remote. Cold, the line's 100 ms a step and the
// sequence's own 10 ms gaps made it 46 ms at any batch: local. A stretched gap
// is never below the line's own step either.
func TestSLOTBTProjectionFollowsTheBatch(t *testing.T) {
	var m stepModel
	for range stepWindow {
		m.observe(4, 0.010)
		m.observe(64, 0.050)
	}
	const compute = 0.36 // 90 ms of the prompt's own a step
	for _, tc := range []struct {
		name   string
		stall  float64 // the line: 10 ms a step + the compute, or more
		plain  stepAt
		tbt    float64
		remote bool
		reason string
		detail string
	}{
		{"cold", 0.40, stepAt{batch: 64}, 0.046, false, "slo_local_fits", "plain step 10.00ms at batch 64 (the decoding sequences' median gap)"},
		{"batch 4", 0.40, m.at(4), 0.046, false, "slo_local_fits", "plain step 10.00ms at batch 4 (learned, bucket) + the prompt's compute"},
		{"batch 64", 0.40, m.at(64), 0.086, true, "slo_remote_tbt_budget", "4 steps of 140.0ms (plain step 50.00ms at batch 64 (learned"},
		// A line above the learned step and the compute is kept: (4·150 + 6·10)/10.
		{"batch 4, the line higher", 0.60, m.at(4), 0.066, false, "slo_local_fits", "4 steps of 150.0ms"},
	} {
		w := newTBTWorker(t)
		w.decoding(101, gaps(40, 10)...)
		c, sl := w.decideWith(8192, tc.stall, compute, tc.plain)
		if !near(math.Round(sl.tbt*1e6)/1e6, tc.tbt) {
			t.Errorf("%s: projected TBT %.3f ms, want %.3f ms", tc.name, sl.tbt*1e3, tc.tbt*1e3)
		}
		wantChoice(t, tc.name, c, tc.remote, tc.reason)
		if !strings.Contains(c.detail, tc.detail) {
			t.Errorf("%s: detail %q, want it to say %q", tc.name, c.detail, tc.detail)
		}
	}
}

// 300 streams of 64-token answers decode in one batch: about one gap in 300
// is sampled, one a step, although no stream emits 300 tokens (counted per
// stream, as first written, none was ever sampled at such a batch).
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
