package router

import (
	"cmp"
	"math"
	"slices"
	"sort"
)

// keyed is a worker's place in a byKey list.
type keyed struct {
	key float64
	ref workerRef
}

func cmpKeyed(a, b keyed) int {
	return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.ref, b.ref))
}

// byKey is a list of workers sorted by a key, ties by slot. A sorted slice, not a
// heap or a tree: the decision walks its first few entries in order and counts
// those above a bound, which a slice does with no pointer chasing, and moving one
// entry is a memmove of at most a thousand 16-byte entries.
type byKey []keyed

func (l byKey) find(key float64, ref workerRef) (int, bool) {
	return slices.BinarySearchFunc(l, keyed{key, ref}, cmpKeyed)
}

func (l *byKey) insert(key float64, ref workerRef) {
	i, _ := l.find(key, ref)
	*l = slices.Insert(*l, i, keyed{key, ref})
}

func (l *byKey) remove(key float64, ref workerRef) {
	if i, ok := l.find(key, ref); ok {
		*l = slices.Delete(*l, i, i+1)
	}
}

// move changes ref's key from old to key, shifting only the entries between.
func (l byKey) move(old, key float64, ref workerRef) {
	i, ok := l.find(old, ref)
	if !ok {
		panic("router: a worker's key is not where its state says")
	}
	e := keyed{key, ref}
	j, _ := l.find(key, ref)
	if j > i {
		copy(l[i:j-1], l[i+1:j])
		l[j-1] = e
	} else {
		copy(l[j+1:i+1], l[j:i])
		l[j] = e
	}
}

// atLeast counts the entries whose key is at least x.
func (l byKey) atLeast(x float64) int {
	return len(l) - sort.Search(len(l), func(i int) bool { return l[i].key >= x })
}

// The decode lists, by the gating class they serve: every decode worker, those
// that prefill locally, those that disaggregate.
const (
	listAll = iota
	listLocal
	listDisagg
	numLists
)

var listKinds = [numLists]workerKind{kindDecodes, kindLocal, kindDisagg}

// listOf is the list holding the workers of kind want (kindDecodes, kindLocal or
// kindDisagg).
func listOf(want workerKind) int {
	switch want {
	case kindLocal:
		return listLocal
	case kindDisagg:
		return listDisagg
	}
	return listAll
}

// loadOrder keeps the routable workers ordered by what of their cost does not
// depend on the request, so that a decision scores the workers holding part of
// the prompt and only the least loaded of the others (byload.go).
type loadOrder struct {
	// load orders decode workers by active blocks + queue term: a worker that holds
	// none of the prompt costs prefill_weight x prompt blocks more than that.
	load [numLists]byKey
	// slack orders them by free blocks less those routed since the last report
	// (+Inf without a report of its pool): it fits a request of at most that many
	// uncached blocks.
	slack [numLists]byKey
	// prefill orders prefill workers by their queue term.
	prefill byKey
}

// listedKinds are the kinds by which a worker is in the lists.
const listedKinds = kindDecodes | kindLocal | kindDisagg | kindPrefill

// keys are a worker's keys in the lists, from its state and the parameters.
func keys(p Params, st *state) (load, slack float64) {
	load = prefillLoad(p, st)
	slack = math.Inf(1)
	if st.total != 0 {
		slack = float64(int(st.free) - st.pendingBlocks)
	}
	return load, slack
}

// prefillLoad is a worker's cost besides the prompt: its queue term, and for a
// worker that decodes its active blocks, added as terms adds them so that a key
// compares as the cost does. A prefill worker that lends (an aggregated worker
// with --lend-prefill) is so ranked among the prefill workers with its decode
// load: a busy lender comes after idle prefill workers and idle lenders.
func prefillLoad(p Params, st *state) float64 {
	q := p.QueueWeight * (st.waitingBlocks + float64(st.pendingBlocks))
	if st.kind&kindDecodes != 0 {
		return float64(st.active) + q
	}
	return q
}

// reindex puts st where its state and the parameters now place it; r.mu is held.
// Whatever changes a worker's kind, load, pending blocks, or the queue weight or
// block size calls it.
func (r *Router) reindex(st *state) {
	kind := st.kind & listedKinds
	if r.byRef[st.ref] != st {
		kind = 0 // it left
	}
	load, slack := keys(r.params, st)
	if kind == st.listed && load == st.loadKey && slack == st.slackKey {
		return
	}
	o := &r.lists
	if kind != st.listed {
		r.unlist(st)
		st.listed, st.loadKey, st.slackKey = kind, load, slack
		if kind&kindPrefill != 0 {
			o.prefill.insert(load, st.ref)
		}
		for i, k := range listKinds {
			if kind&k != 0 {
				o.load[i].insert(load, st.ref)
				o.slack[i].insert(slack, st.ref)
			}
		}
		return
	}
	if kind&kindPrefill != 0 && load != st.loadKey {
		o.prefill.move(st.loadKey, load, st.ref)
	}
	for i, k := range listKinds {
		if kind&k == 0 {
			continue
		}
		if load != st.loadKey {
			o.load[i].move(st.loadKey, load, st.ref)
		}
		if slack != st.slackKey {
			o.slack[i].move(st.slackKey, slack, st.ref)
		}
	}
	st.loadKey, st.slackKey = load, slack
}

// unlist takes st out of every list.
func (r *Router) unlist(st *state) {
	o := &r.lists
	if st.listed&kindPrefill != 0 {
		o.prefill.remove(st.loadKey, st.ref)
	}
	for i, k := range listKinds {
		if st.listed&k != 0 {
			o.load[i].remove(st.loadKey, st.ref)
			o.slack[i].remove(st.slackKey, st.ref)
		}
	}
	st.listed = 0
}

// reindexAll follows a change of the queue weight or the block size, which moves
// every key.
func (r *Router) reindexAll() {
	for _, st := range r.order {
		r.reindex(st)
	}
}
