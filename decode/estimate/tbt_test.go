package estimate

import (
	"math"
	"slices"
	"testing"
	"time"
)

// A stream keeps exactly the k longest of its gaps, k a tenth of the gaps its
// max_tokens allows (rounded up), whatever order they come in.
func TestTopGaps(t *testing.T) {
	for _, tc := range []struct {
		maxTokens, capacity int
	}{{0, maxTBTGaps}, {1, 0}, {2, 1}, {11, 1}, {12, 2}, {101, 10}, {2001, 200}, {100000, maxTBTGaps}} {
		if got := tbtCapacity(tc.maxTokens); got != tc.capacity {
			t.Errorf("tbtCapacity(%d) = %d, want %d", tc.maxTokens, got, tc.capacity)
		}
	}
	var ss Streams
	lv, _ := ss.Add(time.Unix(0, 0), 101) // 100 gaps: keeps 10
	if cap(lv.gaps.g) != 10 {
		t.Fatalf("capacity %d, want 10", cap(lv.gaps.g))
	}
	// 100 gaps of 1..100 ms in a scrambled order (37 is prime to 100).
	at := time.Unix(1, 0)
	lv.Token(at)
	var all []float64
	for i := range 100 {
		g := time.Duration((i*37)%100+1) * time.Millisecond
		at = at.Add(g)
		lv.Token(at)
		all = append(all, g.Seconds())
	}
	slices.Sort(all)
	want := all[90:]
	for i := range want {
		if math.Abs(lv.gaps.g[i]-want[i]) > 1e-9 {
			t.Fatalf("kept %v, want the 10 longest %v", lv.gaps.g, want)
		}
	}
	if lv.gaps.n != 100 {
		t.Errorf("%d gaps seen, want 100", lv.gaps.n)
	}
	if allocs := testing.AllocsPerRun(100, func() { at = at.Add(time.Millisecond); lv.Token(at) }); allocs != 0 {
		t.Errorf("%v allocations a token, want none", allocs)
	}
}

// The projected TBT is the mean of the k longest among the observed gaps, the
// stretched ones and the plain ones, as bench.Result.TBT would compute it on the
// whole answer.
func TestProjectTBT(t *testing.T) {
	for _, tc := range []struct {
		name        string
		top         []float64
		observed, k int
		stretched   int
		stretch     float64
		plain       int
		step        float64
		want        float64
	}{
		{"fresh: one stretched gap among plain ones", nil, 0, 3, 1, 0.1, 29, 0.01, (0.1 + 0.02) / 3},
		{"observed long gaps come first", []float64{0.05, 0.08, 0.09}, 10, 3, 1, 0.1, 9, 0.01, (0.1 + 0.09 + 0.08) / 3},
		{"fewer gaps than k", nil, 0, 5, 1, 0.1, 1, 0.01, (0.1 + 0.01) / 2},
		{"observed beyond the kept ones count as the least kept", []float64{0.05}, 20, 3, 0, 0, 2, 0.01, 0.05},
		{"no stretch, nothing observed", nil, 0, 2, 0, 0, 10, 0.01, 0.01},
		{"k 0", nil, 0, 0, 1, 0.1, 1, 0.01, 0},
	} {
		got := projectTBT(tc.top, tc.observed, tc.k, tc.stretched, tc.stretch, tc.plain, tc.step)
		if math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: %g, want %g", tc.name, got, tc.want)
		}
	}
}
