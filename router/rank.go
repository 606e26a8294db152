package router

import (
	"math"

	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
)

// MaxRankedPrefill is how many prefill workers a route reply names, best first:
// the one to use, one to retry on, and a few more for discovery's sake (the
// decode worker skips ids it does not know). The decode worker keeps this
// order: it is the only ranking of prefill workers. Ranking the whole pool built a
// message per prefill worker per request: with 100 prefill workers, a third of
// the decision's time and most of its garbage.
const MaxRankedPrefill = 8

// ranked is a prefill candidate's cost and its index among the candidates.
type ranked struct {
	cost float64
	i    int
}

// rankPrefill orders prefill workers by what they would add, uncached blocks to
// compute and blocks already queued, and returns the first MaxRankedPrefill. It
// A lender (an aggregated worker lending prefill) adds its decode load, its active
// blocks, as it does as a decode candidate. It orders only those: the cheapest few are kept in a short sorted buffer as the
// costs are worked out, and the workers that tie with the last one kept are then
// drawn from fairly (shuffleTies), as if the whole pool had been sorted.
//
// self, the decode worker chosen (nil: none), is never named: a lender chosen to
// decode would otherwise be told to send its prompt to itself. The messages are
// pointed to from into (a fresh array if nil), which the reply owns.
func (r *Router) rankPrefill(p Params, ps []candidate, self *state, promptBlocks, blockSize int, into *[MaxRankedPrefill]*routerv1.RankedWorker) []*routerv1.RankedWorker {
	bs := float64(blockSize)
	// The candidates come in id order, and a cost enters the buffer only below
	// the last kept: equal costs stay in id order, as a stable sort leaves them.
	// Each cost is kept with its candidate, for the ties gathered below.
	rs := r.ranked[:0]
	for i := range ps {
		c := &ps[i]
		if c.st == self {
			// Never a cost that ties: the gathering of ties below skips it too.
			c.cost = math.NaN()
			continue
		}
		c.cost = p.PrefillWeight*float64(promptBlocks-int(c.cached)) + prefillLoad(p, c.st)
		x := c.cost
		if len(rs) == MaxRankedPrefill && x >= rs[len(rs)-1].cost {
			continue
		}
		if len(rs) < MaxRankedPrefill {
			rs = append(rs, ranked{})
		}
		k := len(rs) - 1
		for ; k > 0 && rs[k-1].cost > x; k-- {
			rs[k] = rs[k-1]
		}
		rs[k] = ranked{cost: x, i: i}
	}
	if n := len(rs); n == MaxRankedPrefill && n < len(ps) {
		// The group tying with the last kept may run on among those not kept: it
		// is gathered whole, in id order, and shuffled with the rest.
		last, g := rs[n-1].cost, n-1
		for g > 0 && rs[g-1].cost == last {
			g--
		}
		rs = rs[:g]
		for i, c := range ps {
			if c.cost == last {
				rs = append(rs, ranked{cost: c.cost, i: i})
			}
		}
	}
	r.ranked = rs
	r.shuffleTies(rs, MaxRankedPrefill)
	n := min(len(rs), MaxRankedPrefill)
	if n == 0 {
		return nil
	}
	if into == nil {
		into = new([MaxRankedPrefill]*routerv1.RankedWorker)
	}
	// The messages and their workers in one allocation, of the size needed: a
	// fleet without prefill workers allocates none.
	slots := make([]rankedSlot, n)
	for k := range n {
		c := ps[rs[k].i]
		w, m := &slots[k].worker, &slots[k].msg
		setWorkerProto(w, c.st.w)
		m.Worker, m.CachedBlocks, m.QueuedTokens = w, uint32(c.cached), c.st.waiting
		m.Cost, m.QueueCostPerToken = rs[k].cost, p.QueueWeight/bs
		into[k] = m
	}
	return into[:n:n]
}

// rankedSlot is a ranked prefill worker's message and its worker's.
type rankedSlot struct {
	msg    routerv1.RankedWorker
	worker routerv1.Worker
}

// shuffleTies puts workers of equal cost in random order, for the groups of ties
// that begin within the first keep. Ordered by id, the first of several idle
// prefill workers would get every remote prefill until its next load report
// showed a queue, while the others sat idle. A group that runs past keep is
// shuffled whole, so that those kept are a fair draw from it.
func (r *Router) shuffleTies(ws []ranked, keep int) {
	for i := 0; i < len(ws) && i < keep; {
		j := i + 1
		for j < len(ws) && ws[j].cost == ws[i].cost {
			j++
		}
		for k := j - 1; k > i; k-- {
			m := i + r.rng.IntN(k-i+1)
			ws[k], ws[m] = ws[m], ws[k]
		}
		i = j
	}
}
