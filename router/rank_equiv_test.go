package router

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// rankPrefill keeps only the first MaxRankedPrefill in a short buffer; it must
// name the same workers in the same order, with the same rng draws, as sorting
// the whole pool and shuffling its ties (refRankPrefill), on pools smaller and
// larger than what it keeps and full of ties.
func TestRankPrefillEqualsSortingAll(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 3))
		n := rng.IntN(40)
		var cs []candidate
		var refs []refCandidate
		for i := range n {
			waiting := uint64(16 * rng.IntN(3))
			st := &state{w: Worker{ID: fmt.Sprintf("p%02d", i)}, waiting: waiting, waitingBlocks: float64(waiting) / 16, pendingBlocks: rng.IntN(2),
				load: &workerv1.Load{WaitingTokens: waiting}}
			cached := rng.IntN(3)
			cs = append(cs, candidate{st: st, cached: int32(cached)})
			refs = append(refs, refCandidate{st: st, cached: cached})
		}
		p := DefaultParams()
		p.QueueWeight = float64(rng.IntN(3))
		a := &Router{cfg: Config{BlockSize: 16}, rng: rand.New(rand.NewPCG(seed, 4))}
		b := &Router{cfg: Config{BlockSize: 16}, rng: rand.New(rand.NewPCG(seed, 4))}
		for range 3 {
			got, want := a.rankPrefill(p, cs, nil, 8, 16, nil), b.refRankPrefill(p, refs, 8)
			if len(got) != len(want) {
				t.Fatalf("seed %d: %d ranked, want %d", seed, len(got), len(want))
			}
			for i := range got {
				if !proto.Equal(got[i], want[i]) {
					t.Fatalf("seed %d: #%d is %v, want %v", seed, i, got[i], want[i])
				}
			}
			if a.rng.Uint64() != b.rng.Uint64() {
				t.Fatalf("seed %d: the rng drifted", seed)
			}
		}
	}
}

// mergeByPos sorts a few candidates and a run usually in order into id order,
// whichever part holds what, as sorting all of them does.
func TestMergeByPosEqualsSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var buf []candidate
	for range 2000 {
		n := rng.IntN(30)
		perm := rng.Perm(n)
		cs := make([]candidate, n)
		for i, p := range perm {
			cs[i].pos = int32(p)
		}
		k := rng.IntN(n + 1)
		if rng.IntN(2) == 0 {
			sortByPos(cs[k:]) // the usual case: the list's run already in order
		}
		buf = mergeByPos(cs, k, buf)
		for i := range cs {
			if cs[i].pos != int32(i) {
				t.Fatalf("perm %v, k %d: merged %v", perm, k, cs)
			}
		}
	}
}
