package kvindex

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// Applying a snapshot by its differences (replace) leaves the index exactly as
// dropping the worker's entries and storing the snapshot did: the same holders
// for every block, the same counts, the same refusal past a worker's limit.
// Snapshots overlap what the worker held by varying amounts, repeat blocks, and
// other workers share blocks with it, so that holder lists grow, shrink and move.
func TestReplaceEqualsClearThenStore(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	universe := make([]uint64, 600)
	for i := range universe {
		universe[i] = rng.Uint64()
	}
	fast, ref := New(), New()
	const workers, limit = 6, 300
	for range workers {
		fast.Add(limit)
		ref.Add(limit)
	}
	for step := range 400 {
		w := Ref(rng.IntN(workers))
		// Keep a random part of what w holds and add random blocks, some twice.
		var snap []uint64
		for h := range ref.owned[w] {
			if rng.IntN(4) > 0 {
				snap = append(snap, h)
			}
		}
		slices.Sort(snap) // map order is random: both indexes get the same list
		for range rng.IntN(limit/2 + 40) {
			snap = append(snap, universe[rng.IntN(len(universe))])
		}
		rng.Shuffle(len(snap), func(i, j int) { snap[i], snap[j] = snap[j], snap[i] })
		errFast := fast.Replace(w, NewBlockSet(snap))
		ref.Clear(w)
		errRef := ref.Store(w, snap)
		if (errFast == nil) != (errRef == nil) {
			t.Fatalf("step %d: replace says %v, Clear then Store %v", step, errFast, errRef)
		}
		if errRef != nil {
			// The router resyncs: both drop the worker's entries.
			fast.Clear(w)
			ref.Clear(w)
		}
		if fast.Blocks() != ref.Blocks() || fast.holders.live != ref.holders.live {
			t.Fatalf("step %d: %d entries over %d blocks, want %d over %d", step, fast.Blocks(), fast.holders.live, ref.Blocks(), ref.holders.live)
		}
		for v := range Ref(workers) {
			if fast.Held(v) != ref.Held(v) {
				t.Fatalf("step %d: worker %d holds %d blocks, want %d", step, v, fast.Held(v), ref.Held(v))
			}
		}
		for _, h := range universe {
			if got, want := fast.holders.get(h), ref.holders.get(h); !slices.Equal(got, want) {
				t.Fatalf("step %d: block %x held by %v, want %v", step, h, got, want)
			}
		}
	}
}
