package kvindex

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tandem-serve/tandem/internal/testutil"
)

// Match agrees with a block-by-block walk for every worker, over random caches that
// hold prefixes of shared chains.
func TestIndexMatchEqualsWalk(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	all := testutil.Chains(rng, 40, 24)
	ix := New()
	held := map[Ref]map[uint64]bool{}
	for w := range 12 {
		ref := ix.Add(1 << 20)
		held[ref] = map[uint64]bool{}
		for range 6 {
			c := all[rng.IntN(len(all))]
			n := rng.IntN(len(c) + 1)
			if err := ix.Store(ref, c[:n]); err != nil {
				t.Fatal(err)
			}
			for _, h := range c[:n] {
				held[ref][h] = true
			}
		}
		// Evict some blocks as an LRU pool does: only leaves, a prefix's tail before
		// its head, so what a worker holds stays closed under prefixes.
		for range 20 * (w % 3) {
			parents := map[uint64]bool{}
			for _, c := range all {
				for i := 1; i < len(c); i++ {
					if held[ref][c[i]] {
						parents[c[i-1]] = true
					}
				}
			}
			var leaves []uint64
			for h := range held[ref] {
				if !parents[h] {
					leaves = append(leaves, h)
				}
			}
			if len(leaves) == 0 {
				break
			}
			slices.Sort(leaves)
			leaf := leaves[rng.IntN(len(leaves))]
			ix.Evict(ref, []uint64{leaf})
			delete(held[ref], leaf)
		}
	}
	for _, q := range all {
		want := map[Ref]int{}
		for ref, hs := range held {
			n := 0
			for n < len(q) && hs[q[n]] {
				n++
			}
			if n > 0 {
				want[ref] = n
			}
		}
		got := map[Ref]int{}
		ix.Match(q, func(ref Ref, n int) { got[ref] = n })
		if len(got) != len(want) {
			t.Fatalf("matched %v, want %v", got, want)
		}
		for ref, n := range want {
			if got[ref] != n {
				t.Fatalf("worker %d: %d blocks, want %d (all: got %v want %v)", ref, got[ref], n, got, want)
			}
		}
	}
	// Removing workers drops exactly their entries.
	for ref := range held {
		ix.Remove(ref)
	}
	if ix.Blocks() != 0 || ix.holders.live != 0 {
		t.Fatalf("after removing every worker: %d entries, %d hashes", ix.Blocks(), ix.holders.live)
	}
}
