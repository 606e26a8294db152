package kvindex

import (
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tandem-serve/tandem/internal/testutil"
)

// The table agrees with a map of sets through adds and removes that keep it near
// its growth point, spill holder lists and fold them back, and shift clusters back
// on deletion; with few holders per block and with many, which moves lists between
// sizes and compacts them.
func TestHolderTableEqualsMap(t *testing.T) {
	t.Run("few", func(t *testing.T) { testHolderTable(t, 900, 6) }) // up to 900 keys in 1024 or 2048 slots
	t.Run("many", func(t *testing.T) { testHolderTable(t, 200, 70) })
}

func testHolderTable(t *testing.T, nkeys, refs int) {
	rng := rand.New(rand.NewPCG(7, uint64(refs)))
	tb := newHolderTable()
	want := map[uint64]map[Ref]bool{}
	keys := make([]uint64, nkeys)
	for i := range keys {
		keys[i] = rng.Uint64()
	}
	check := func(step int) {
		t.Helper()
		multi := 0
		for _, k := range keys {
			w := slices.Sorted(maps.Keys(want[k]))
			if got := tb.get(k); !slices.Equal(got, w) || tb.count(k) != len(w) {
				t.Fatalf("step %d: key %x holders %v (count %d), want %v", step, k, got, tb.count(k), w)
			}
			if len(w) > 1 {
				multi++
			}
		}
		live := 0
		for _, hs := range want {
			if len(hs) > 0 {
				live++
			}
		}
		lists, words := 0, 0
		for _, s := range tb.slots {
			if s.hold&spilled != 0 {
				lists++
				words += 2 + 1<<tb.lists.a[s.hold&^spilled+1]
			}
		}
		if tb.live != live || lists != multi || words != tb.lists.used {
			t.Fatalf("step %d: %d live, %d lists in %d words; want %d, %d, %d", step, tb.live, lists, tb.lists.used, live, multi, words)
		}
	}
	for step := range 200_000 {
		k := keys[rng.IntN(len(keys))]
		ref := Ref(rng.IntN(refs))
		if want[k] == nil {
			want[k] = map[Ref]bool{}
		}
		if rng.IntN(2) == 0 {
			if tb.add(k, ref) == want[k][ref] {
				t.Fatalf("step %d: add(%x, %d) said new=%v", step, k, ref, want[k][ref])
			}
			want[k][ref] = true
		} else {
			if tb.remove(k, ref) != want[k][ref] {
				t.Fatalf("step %d: remove(%x, %d) said held=%v", step, k, ref, !want[k][ref])
			}
			delete(want[k], ref)
		}
		if step%20_000 == 0 {
			check(step)
		}
	}
	check(-1)
}

// The table grows with what it holds and shrinks back when that is removed.
func TestHolderTableShrinks(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	tb := newHolderTable()
	keys := make([]uint64, 100_000)
	for i := range keys {
		keys[i] = rng.Uint64()
		tb.add(keys[i], Ref(i%3))
		if i%2 == 0 {
			tb.add(keys[i], 7)
		}
	}
	if len(tb.slots) < len(keys)*4/3 {
		t.Fatalf("%d slots for %d keys", len(tb.slots), len(keys))
	}
	for i, k := range keys {
		if got := tb.get(k); len(got) != 1+(1-i%2) || got[0] != Ref(i%3) {
			t.Fatalf("key %d: holders %v", i, got)
		}
	}
	for i, k := range keys {
		if !tb.remove(k, Ref(i%3)) || (i%2 == 0 && !tb.remove(k, 7)) {
			t.Fatalf("key %d not held", i)
		}
	}
	if tb.live != 0 || len(tb.slots) != minSlots || tb.lists.used != 0 || len(tb.lists.a) > 1<<12 {
		t.Fatalf("emptied: %d live, %d slots, lists use %d of %d words", tb.live, len(tb.slots), tb.lists.used, len(tb.lists.a))
	}
}

// Match agrees with a block-by-block walk while workers store, evict their cached
// prefixes' tails, clear, leave and have their slots reused by newcomers. Every
// worker also holds some of one "system prompt", so that small groups of workers
// are partitioned against blocks that most of the fleet holds.
func TestIndexMatchEqualsWalkUnderChurn(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	all := testutil.Chains(rng, 60, 40)
	children := map[uint64][]uint64{}
	for _, c := range all {
		for i := 1; i < len(c); i++ {
			if !slices.Contains(children[c[i-1]], c[i]) {
				children[c[i-1]] = append(children[c[i-1]], c[i])
			}
		}
	}
	ix := New()
	held := map[Ref]map[uint64]bool{}
	join := func() {
		ref := ix.Add(1 << 20)
		system := all[0][:1+rng.IntN(len(all[0]))]
		if err := ix.Store(ref, system); err != nil {
			t.Fatal(err)
		}
		held[ref] = map[uint64]bool{}
		for _, h := range system {
			held[ref][h] = true
		}
	}
	for range 100 {
		join()
	}
	refs := func() []Ref { return slices.Sorted(maps.Keys(held)) }
	for round := range 20 {
		for _, ref := range refs() {
			switch k := rng.IntN(20); {
			case k == 0:
				ix.Clear(ref)
				held[ref] = map[uint64]bool{}
			case k == 1:
				ix.Remove(ref)
				delete(held, ref)
				join()
			case k < 10:
				c := all[rng.IntN(len(all))]
				n := rng.IntN(len(c) + 1)
				if err := ix.Store(ref, c[:n]); err != nil {
					t.Fatal(err)
				}
				for _, h := range c[:n] {
					held[ref][h] = true
				}
			default:
				// Evict leaves only, as an LRU pool does.
				for range rng.IntN(30) {
					var leaves []uint64
					for h := range held[ref] {
						if !slices.ContainsFunc(children[h], func(c uint64) bool { return held[ref][c] }) {
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
		}
		entries := 0
		for ref, hs := range held {
			entries += len(hs)
			if ix.Held(ref) != len(hs) {
				t.Fatalf("round %d: worker %d holds %d, want %d", round, ref, ix.Held(ref), len(hs))
			}
		}
		if ix.Blocks() != entries {
			t.Fatalf("round %d: %d entries, want %d", round, ix.Blocks(), entries)
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
			ix.Match(q, func(ref Ref, n int) {
				if _, dup := got[ref]; dup {
					t.Fatalf("round %d: worker %d found twice", round, ref)
				}
				got[ref] = n
			})
			if !maps.Equal(got, want) {
				t.Fatalf("round %d: matched %v, want %v", round, got, want)
			}
			if ix.m.splits != 0 {
				t.Fatalf("round %d: Match fell back to splitting sets though every worker keeps the nesting", round)
			}
		}
	}
	for _, ref := range refs() {
		ix.Remove(ref)
	}
	if ix.Blocks() != 0 || ix.holders.live != 0 || len(ix.holders.slots) != minSlots {
		t.Fatalf("after removing every worker: %d entries, %d hashes in %d slots", ix.Blocks(), ix.holders.live, len(ix.holders.slots))
	}
}

// When a worker holds blocks without their parents, against what the engines
// promise, Match still reports each worker holding the first block once, and no
// other, and the walk's answer for those that keep the nesting.
func TestMatchWithoutNesting(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	c := testutil.Chains(rng, 1, 30)[0]
	ix := New()
	var refs []Ref
	for range 6 {
		refs = append(refs, ix.Add(1<<20))
	}
	stores := [][]uint64{c[:10], c[:20], c[:30], c[5:25], append(c[:3:3], c[8:12]...), c[:1]}
	for i, ref := range refs {
		if err := ix.Store(ref, stores[i]); err != nil {
			t.Fatal(err)
		}
	}
	want := map[Ref]int{refs[0]: 10, refs[1]: 20, refs[2]: 30, refs[5]: 1}
	got := map[Ref]int{}
	ix.Match(c, func(ref Ref, n int) {
		if _, dup := got[ref]; dup {
			t.Fatalf("worker %d reported twice", ref)
		}
		got[ref] = n
	})
	if _, ok := got[refs[3]]; ok {
		t.Errorf("worker %d, which lacks the first block, reported", refs[3])
	}
	if _, ok := got[refs[4]]; !ok {
		t.Errorf("worker %d, which holds the first block, not reported", refs[4])
	}
	for ref, n := range want {
		if got[ref] != n {
			t.Errorf("worker %d: %d blocks, want %d (all %v)", ref, got[ref], n, got)
		}
	}
}
