package estimate

import (
	"math"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// A batch of 64 steps slower than one of 4, and the model says so at each,

// between them and past them; a stretched gap now and then (a prefill chunk

// in the step) does not move a bucket's median.

func TestStepModelLearnsTheBatch(t *testing.T) {
	var m StepModel
	if at := m.At(4); at.Learned {
		t.Fatalf("cold model learned %+v", at)
	}
	for i := range StepWindow {
		g := 0.010
		if i%5 == 0 {
			g = 0.090 // a step that carried a prefill chunk
		}
		m.Observe(4, g)
	}
	if at := m.At(4); !at.Learned || !near(at.Seconds, 0.010) || at.Batch != 4 {
		t.Errorf("at(4) = %+v, want 10 ms learned", at)
	}
	if at := m.At(64); at.Learned {
		t.Errorf("at(64) = %+v with only batch 4 measured: want cold (one bucket says nothing of the slope)", at)
	}
	for range StepWindow {
		m.Observe(64, 0.050)
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
		at := m.At(tc.batch)
		if !at.Learned || !near(at.Seconds, tc.want) || at.From != tc.from {
			t.Errorf("at(%d) = %+v, want %.2f ms %s", tc.batch, at, tc.want*1e3, tc.from)
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { m.Observe(64, 0.05); _ = m.At(16) }); allocs != 0 {
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

// 300 streams of 64-token answers decode in one batch: about one gap in 300

// is sampled, one a step, although no stream emits 300 tokens (counted per

// stream, as first written, none was ever sampled at such a batch).
