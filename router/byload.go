package router

import (
	"math"
	"slices"
)

// The decision by load order. A worker holding none of the prompt costs
// prefill_weight x prompt blocks + its key in the load lists (order.go), so among
// such workers the cheapest are the first of a list: the decision scores the
// workers the index names as holding part of the prompt, and walks the lists only
// as far as the least cost and its ties. Counts (how many are in the class, how
// many fit) come from list lengths and the slack lists, corrected for the holders
// and the excluded workers, which are scored apart. What it decides is exactly what
// the pass over every worker decides (byload_equiv_test.go), rng draws included.
//
// It applies at temperature 0 only: a softmax gives every scored worker a
// probability and samples them in id order, which reads every one. An explanation
// lists every candidate, and a request for one model among workers of several
// counts each worker of the others: both take the full pass.

// byLoad says whether the decision may go by load order. fp is the request's model
// fingerprint and model its number.
func (r *Router) byLoad(p Params, explain bool, fp string, model uint32) bool {
	return !r.fullPass && p.Temperature == 0 && !explain &&
		(fp == "" || (model != 0 && r.modelCount[model] == len(r.order)))
}

// choice is what a decision settles before the reply is built.
type choice struct {
	win    candidate
	scored int // candidates among which win was the least cost
	class  int // the class scored, classNames
}

// decideByLoad is the decision by load order. excluded are the workers this
// request excludes, once each; cached and hits are match's.
func (r *Router) decideByLoad(p Params, reqID string, cached []int32, excluded []*state, gateClass int, want workerKind,
	promptBlocks, bs int, effective int) (ch choice, prefillers []candidate, ok bool) {
	// The holders, scored as the full pass scores them.
	held, prefillers := r.decoders[:0], r.prefills[:0]
	for _, ref := range r.hits {
		st := r.byRef[ref]
		if st == nil || st.excluded == r.requests {
			continue
		}
		c := candidate{st: st, cached: cached[ref], pos: int32(st.pos)}
		if st.kind&kindPrefill != 0 {
			// A lender is both: a prefill candidate and a decode one.
			prefillers = append(prefillers, c)
		}
		if st.kind&kindDecodes != 0 {
			pre, dec, q := terms(p, st, int(c.cached), promptBlocks, bs)
			c.cost = pre + dec + q
			if st.total == 0 || int(st.free)-st.pendingBlocks >= promptBlocks-int(c.cached) {
				c.flags = fits
			}
			held = append(held, c)
		}
	}
	r.decoders = held
	// members counts the workers of a list, less those excluded.
	members := func(l int) int {
		n := len(r.lists.load[l])
		for _, st := range excluded {
			if st.kind&listKinds[l] != 0 {
				n--
			}
		}
		return n
	}

	l := listAll
	ch.class = gateClass
	if p.ISLGate {
		if l = listOf(want); members(l) == 0 {
			ch.class, l = classFallback, listAll
		}
	}
	n := members(l)
	if n == 0 {
		return ch, prefillers, false
	}
	if p.ISLGate && p.ISLAdaptive {
		bestLocal, stalled := r.leastOf(p, held, listLocal, cached, promptBlocks, bs)
		bestDisagg, _ := r.leastOf(p, held, listDisagg, cached, promptBlocks, bs)
		prefillQueue := math.Inf(1)
		for _, e := range r.lists.prefill {
			if r.byRef[e.ref].excluded != r.requests {
				prefillQueue = e.key // the queue term, as the full pass works it out
				break
			}
		}
		local, disagg := adaptCosts(p, bestLocal, stalled, bestDisagg, prefillQueue)
		r.adapt(p, reqID, effective, local, disagg)
	}

	// How many fit: the slack list counts those with room for the whole prompt;
	// a holder needs room for its uncached blocks only, and is counted as it is.
	pb := float64(promptBlocks)
	nFit := r.lists.slack[l].atLeast(pb)
	for _, st := range excluded {
		if st.kind&listKinds[l] != 0 && st.slackKey >= pb {
			nFit--
		}
	}
	for _, c := range held {
		if c.st.kind&listKinds[l] != 0 {
			if c.st.slackKey >= pb {
				nFit--
			}
			if c.flags&fits != 0 {
				nFit++
			}
		}
	}
	needFit := nFit > 0
	ch.scored = n
	if needFit {
		ch.scored = nFit
	} else {
		r.metrics.busyFallback.Inc()
	}

	// The least cost among those scored, and every worker at it.
	ties := r.leastByLoad(p, r.lists.load[l], needFit, cached, promptBlocks, bs, r.ties[:0])
	lo := math.Inf(1)
	if len(ties) > 0 {
		lo = ties[0].cost
	}
	for _, c := range held {
		if c.st.kind&listKinds[l] != 0 && (!needFit || c.flags&fits != 0) {
			lo = min(lo, c.cost)
		}
	}
	ties = slices.DeleteFunc(ties, func(c candidate) bool { return c.cost != lo })
	for _, c := range held {
		if c.st.kind&listKinds[l] != 0 && (!needFit || c.flags&fits != 0) && c.cost == lo {
			ties = append(ties, c)
		}
	}
	r.ties = ties
	if len(ties) == 0 {
		return ch, prefillers, false
	}
	// In id order, as the full pass meets them, so that the rng draws pick the
	// same one.
	if len(ties) > 1 {
		sortByPos(ties)
	}
	chosen := 0
	for i := range ties {
		if r.rng.IntN(i+1) == 0 {
			chosen = i
		}
	}
	ch.win = ties[chosen]
	return ch, r.prefillByLoad(p, prefillers, ch.win.st, cached, promptBlocks), true
}

// leastOf is the least cost of the workers of list l that are not excluded, the
// holders among them as scored, and the least running sequences x uncached
// blocks among the workers at that cost.
func (r *Router) leastOf(p Params, held []candidate, l int, cached []int32, promptBlocks, bs int) (lo, stalled float64) {
	least := r.leastByLoad(p, r.lists.load[l], false, cached, promptBlocks, bs, r.ties[:0])
	r.ties = least[:0]
	lo = math.Inf(1)
	if len(least) > 0 {
		lo = least[0].cost
	}
	for _, c := range held {
		if c.st.kind&listKinds[l] != 0 {
			lo = min(lo, c.cost)
		}
	}
	stalled = math.Inf(1)
	for _, c := range least {
		if c.cost == lo {
			stalled = min(stalled, float64(c.st.running)*float64(promptBlocks))
		}
	}
	for _, c := range held {
		if c.st.kind&listKinds[l] != 0 && c.cost == lo {
			stalled = min(stalled, float64(c.st.running)*float64(promptBlocks-int(c.cached)))
		}
	}
	if math.IsInf(stalled, 1) {
		stalled = 0
	}
	return lo, stalled
}

// leastByLoad appends to out the workers of list l holding none of the prompt,
// not excluded, and fitting it if needFit, whose cost is the least among those,
// in list order. It reads the list only as far as that cost: a worker's key is its
// cost less prefill_weight x prompt blocks, up to rounding, which the bound allows
// for.
func (r *Router) leastByLoad(p Params, l byKey, needFit bool, cached []int32, promptBlocks, bs int, out []candidate) []candidate {
	base := p.PrefillWeight * float64(promptBlocks)
	pb := float64(promptBlocks)
	lo, bound := math.Inf(1), math.Inf(1)
	start := len(out)
	for _, e := range l {
		if e.key > bound {
			break
		}
		st := r.byRef[e.ref]
		if cached[e.ref] != 0 || st.excluded == r.requests || (needFit && st.slackKey < pb) {
			continue
		}
		pre, dec, q := terms(p, st, 0, promptBlocks, bs)
		c := pre + dec + q
		if c > lo {
			continue
		}
		if c < lo {
			// Costs are non-negative sums of three terms, each rounded once: past
			// key lo - base plus a relative 1e-12, far above the rounding, no
			// cost can be lo or less.
			lo, out = c, out[:start]
			bound = c - base + (c+1)*1e-12
		}
		out = append(out, candidate{st: st, cost: c, flags: fits, pos: int32(st.pos)})
	}
	return out
}

// prefillByLoad returns the prefill candidates rankPrefill needs, in id order:
// the holders, and the least queued of the others, as many as it keeps and every
// one tying with the last of those (whose cost, the queue term plus the same
// prefill term, cannot fall along the list). self, the decode worker chosen, is
// not one of them (rankPrefill).
func (r *Router) prefillByLoad(p Params, held []candidate, self *state, cached []int32, promptBlocks int) []candidate {
	out, n, k := held, 0, len(held)
	base := p.PrefillWeight * float64(promptBlocks)
	last := math.Inf(1)
	for _, e := range r.lists.prefill {
		st := r.byRef[e.ref]
		if cached[e.ref] != 0 || st.excluded == r.requests || st == self {
			continue
		}
		c := base + e.key
		if n >= MaxRankedPrefill && c > last {
			break
		}
		out = append(out, candidate{st: st, pos: int32(st.pos)})
		if n++; n == MaxRankedPrefill {
			last = c
		}
	}
	r.merge = mergeByPos(out, k, r.merge)
	r.prefills = out
	return out
}

// sortByPos puts candidates in id order (state.pos), as the full pass meets them.
// Those drawn from a list in slot order usually are already: with a hundred idle
// prefill workers tied, sorting them anyway, reading each one's state, was a
// tenth of a decision.
func sortByPos(cs []candidate) {
	if !slices.IsSortedFunc(cs, byPos) {
		slices.SortFunc(cs, byPos)
	}
}

func byPos(a, b candidate) int { return int(a.pos - b.pos) }

// mergeByPos puts cs in id order when cs[k:] is a run that usually is already
// (prefillByLoad's walk of a list) and cs[:k] a few others (the holders): each
// part sorted if it is not, then merged through buf, which it returns grown.
func mergeByPos(cs []candidate, k int, buf []candidate) []candidate {
	a, b := cs[:k], cs[k:]
	sortByPos(a)
	sortByPos(b)
	if len(a) == 0 || len(b) == 0 || a[len(a)-1].pos < b[0].pos {
		return buf
	}
	buf = append(buf[:0], a...)
	i, j, o := 0, 0, 0
	for i < len(buf) && j < len(b) {
		// o never passes k+j, so b[j] is read before it is overwritten.
		if buf[i].pos < b[j].pos {
			cs[o], i = buf[i], i+1
		} else {
			cs[o], j = b[j], j+1
		}
		o++
	}
	copy(cs[o:], buf[i:])
	return buf
}
