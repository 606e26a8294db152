package parallel

import (
	"runtime"
	"sync/atomic"
	"testing"
)

// Every index is visited exactly once, split or not, at any GOMAXPROCS.
func TestForVisitsEachIndexOnce(t *testing.T) {
	for _, procs := range []int{1, 2, 5} {
		old := runtime.GOMAXPROCS(procs)
		for _, c := range []struct{ n, cost, min int }{{0, 1, 0}, {1, 1, 0}, {7, 1, 0}, {100, 10, 0}, {1000, 1, 1 << 20}, {3, 1 << 20, 1}} {
			seen := make([]atomic.Int32, c.n)
			calls := atomic.Int32{}
			For(c.n, c.cost, c.min, func(lo, hi int) {
				calls.Add(1)
				if lo > hi || lo < 0 || hi > c.n {
					t.Errorf("range [%d, %d) of %d", lo, hi, c.n)
				}
				for i := lo; i < hi; i++ {
					seen[i].Add(1)
				}
			})
			for i := range seen {
				if v := seen[i].Load(); v != 1 {
					t.Fatalf("procs %d, %+v: index %d visited %d times", procs, c, i, v)
				}
			}
			small := c.n*c.cost < c.min || procs == 1 || c.n <= 1
			if small && calls.Load() > 1 {
				t.Errorf("procs %d, %+v: below the threshold the work was split in %d", procs, c, calls.Load())
			}
			if !small && calls.Load() < 2 {
				t.Errorf("procs %d, %+v: above the threshold the work was not split", procs, c)
			}
		}
		runtime.GOMAXPROCS(old)
	}
}
