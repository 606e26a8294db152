package router

// The routing decision as it was before the scoring pass was fused (commit
// f03bd0d), kept to check that the fused pass decides exactly the same. The
// adaptive threshold's step (adapt) is not copied: the reference works out its
// inputs by its own pass and calls the real one.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"connectrpc.com/connect"

	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// refCandidate is one worker scored for one request.
type refCandidate struct {
	st      *state
	cached  int // leading prompt blocks it holds
	prefill float64
	decode  float64
	queue   float64
	cost    float64
	note    string
	scored  bool
}

// routeRef picks the decode worker for a request and ranks the prefill workers.
//
// Decode candidates cost prefill_weight x uncached prompt blocks + active decode
// blocks + queue_weight x (blocks waiting to prefill + blocks routed there since
// its last report). With gating on, only one class of worker is scored, chosen by
// the effective prompt length (prompt minus the best cached prefix); an empty class
// falls back to every worker. A worker without free blocks for the request is
// skipped unless none has them. The pick is the argmin at temperature 0 (ties at
// random), else a softmax over normalised costs.
func (r *Router) routeRef(_ context.Context, req *connect.Request[routerv1.RouteRequest]) (*connect.Response[routerv1.RouteResponse], error) {
	start := time.Now()
	m := req.Msg
	if m.GetPromptTokens() == 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("prompt_tokens: must be positive"))
	}
	bs := r.cfg.BlockSize
	if b := m.GetBlockSize(); b != 0 && int(b) != bs {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("block_size: %d, the workers use %d", b, bs))
	}
	if full := int(m.GetPromptTokens()) / bs; len(m.GetBlockHashes()) > full {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("block_hashes: %d hashes for %d prompt tokens (%d full blocks)",
			len(m.GetBlockHashes()), m.GetPromptTokens(), full))
	}
	promptBlocks := (int(m.GetPromptTokens()) + bs - 1) / bs

	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.params
	cached := make([]int32, r.ix.Slots())
	clear(cached)
	r.ix.Match(m.GetBlockHashes(), func(ref workerRef, n int) { cached[ref] = int32(n) })

	var decoders, prefillers []refCandidate
	best := 0
	for _, st := range r.order {
		// A worker waiting for a resync is still a healthy member: it is routable,
		// with no cache credited until its snapshot arrives.
		if slices.Contains(m.GetExcludeWorkerIds(), st.w.ID) || st.w.Draining {
			continue
		}
		c := refCandidate{st: st, cached: int(cached[st.ref])}
		switch {
		case st.w.decodes():
			decoders = append(decoders, c)
			best = max(best, c.cached)
		case st.w.Mode == workerv1.WorkerMode_WORKER_MODE_PREFILL:
			prefillers = append(prefillers, c)
		}
	}
	if len(decoders) == 0 {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("no decode worker is available"))
	}
	effective := max(0, int(m.GetPromptTokens())-best*bs)

	for i := range decoders {
		c := &decoders[i]
		l := c.st.load
		c.prefill = p.PrefillWeight * float64(promptBlocks-c.cached)
		c.decode = float64(l.GetActiveBlocks())
		c.queue = p.QueueWeight * (float64(l.GetWaitingTokens())/float64(bs) + float64(c.st.pendingBlocks))
		c.cost = c.prefill + c.decode + c.queue
	}
	class := r.refGate(p, effective, decoders)
	r.refAdapt(p, m.GetRequestId(), effective, decoders, prefillers, promptBlocks)
	r.refBusyGate(decoders, promptBlocks)

	chosen := r.refPick(p, decoders)
	if chosen < 0 {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("no decode worker could be scored"))
	}
	win := &decoders[chosen]
	win.st.pendingBlocks += promptBlocks - win.cached
	r.metrics.routed.WithLabelValues(win.st.w.ID).Inc()
	r.metrics.gate.WithLabelValues(class).Inc()
	r.metrics.cachedBlocks.Observe(float64(win.cached))

	resp := &routerv1.RouteResponse{
		DecodeWorker:       workerProto(win.st.w),
		PrefillWorkers:     r.refRankPrefill(p, prefillers, promptBlocks),
		DecodeCachedBlocks: uint32(win.cached),
		Reason: fmt.Sprintf("cost %.1f (cached %d/%d blocks) lowest of %d scored, class %s, effective %d tokens",
			win.cost, win.cached, promptBlocks, refCountScored(decoders), class, effective),
	}
	if m.GetExplain() {
		resp.Explanation = r.refExplain(p, effective, class, decoders, chosen, promptBlocks)
	}
	r.metrics.latency.Observe(time.Since(start).Seconds())
	return connect.NewResponse(resp), nil
}

// refGate marks which candidates are scored, by class, and names the class used.
func (r *Router) refGate(p Params, effective int, cs []refCandidate) string {
	if !p.ISLGate {
		for i := range cs {
			cs[i].scored = true
		}
		return "all"
	}
	class, in := "disagg", Worker.Disaggregates
	if effective < r.threshold {
		class, in = "local", Worker.PrefillsLocally
	}
	n := 0
	for i := range cs {
		if in(cs[i].st.w) {
			cs[i].scored = true
			n++
		} else {
			cs[i].note = "gated out: not in class " + class
		}
	}
	if n > 0 {
		return class
	}
	for i := range cs {
		cs[i].scored, cs[i].note = true, "class "+class+" is empty: scoring every worker"
	}
	return "fallback-all"
}

// refAdapt works out, by a pass of its own over the candidates, what the
// adaptive threshold weighs: the least cost in each class, the stalled
// sequences at the least local cost, the least prefill queue. Those are what
// the fused pass (and the decision by load order) find another way, so they are
// what the comparison checks; what adapt then does with them, the evidence and
// its hysteresis, is adapt.go's own, called here rather than copied (a copy
// would go on passing after adapt.go changed alone), and adapt_test.go checks it.
func (r *Router) refAdapt(p Params, reqID string, effective int, cs, prefillers []refCandidate, promptBlocks int) {
	if !p.ISLGate || !p.ISLAdaptive {
		return
	}
	bestLocal, bestDisagg := math.Inf(1), math.Inf(1)
	for _, c := range cs {
		if c.st.w.PrefillsLocally() {
			bestLocal = min(bestLocal, c.cost)
		}
		if c.st.w.Disaggregates() {
			bestDisagg = min(bestDisagg, c.cost)
		}
	}
	stalled := math.Inf(1)
	for _, c := range cs {
		if c.st.w.PrefillsLocally() && c.cost == bestLocal {
			stalled = min(stalled, float64(c.st.load.GetRunningSequences())*float64(promptBlocks-c.cached))
		}
	}
	if math.IsInf(stalled, 1) {
		stalled = 0
	}
	queue := math.Inf(1)
	for _, c := range prefillers {
		queue = min(queue, p.QueueWeight*(float64(c.st.load.GetWaitingTokens())/float64(r.blockSize)+float64(c.st.pendingBlocks)))
	}
	local, disagg := adaptCosts(p, bestLocal, stalled, bestDisagg, queue)
	r.adapt(p, reqID, effective, local, disagg)
}

// refBusyGate unscores workers that lack free blocks for the request, unless that
// would leave nobody.
func (r *Router) refBusyGate(cs []refCandidate, promptBlocks int) {
	fits := func(c refCandidate) bool {
		l := c.st.load
		if l == nil || l.GetTotalBlocks() == 0 {
			return true // no report yet: nothing says it is full
		}
		return int(l.GetFreeBlocks())-c.st.pendingBlocks >= promptBlocks-c.cached
	}
	some := false
	for _, c := range cs {
		some = some || (c.scored && fits(c))
	}
	if !some {
		r.metrics.busyFallback.Inc()
		return
	}
	for i := range cs {
		if cs[i].scored && !fits(cs[i]) {
			cs[i].scored, cs[i].note = false, "busy: not enough free blocks"
		}
	}
}

// refPick returns the index of the chosen refCandidate among the scored ones.
func (r *Router) refPick(p Params, cs []refCandidate) int {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, c := range cs {
		if c.scored {
			lo, hi = min(lo, c.cost), max(hi, c.cost)
		}
	}
	if math.IsInf(lo, 1) {
		return -1
	}
	if p.Temperature == 0 || hi == lo {
		n, chosen := 0, -1
		for i, c := range cs {
			if c.scored && c.cost == lo {
				// Reservoir sampling: each tied worker equally likely, one pass.
				if n++; r.rng.IntN(n) == 0 {
					chosen = i
				}
			}
		}
		return chosen
	}
	// Costs normalised to [0, 1] so that the temperature means the same whatever
	// the scale of the costs (as Dynamo does).
	total := 0.0
	weights := make([]float64, len(cs))
	for i, c := range cs {
		if c.scored {
			weights[i] = math.Exp(-(c.cost - lo) / (hi - lo) / p.Temperature)
			total += weights[i]
		}
	}
	x := r.rng.Float64() * total
	last := -1
	for i, w := range weights {
		if w > 0 {
			last = i
			if x -= w; x < 0 {
				return i
			}
		}
	}
	return last
}

// refRankPrefill orders prefill workers by what they would add: uncached blocks to
// compute and blocks already queued.
func (r *Router) refRankPrefill(p Params, ps []refCandidate, promptBlocks int) []*routerv1.RankedWorker {
	bs := float64(r.cfg.BlockSize)
	out := make([]*routerv1.RankedWorker, 0, len(ps))
	for _, c := range ps {
		q := c.st.load.GetWaitingTokens()
		out = append(out, &routerv1.RankedWorker{
			Worker: workerProto(c.st.w), CachedBlocks: uint32(c.cached), QueuedTokens: q,
			Cost:              p.PrefillWeight*float64(promptBlocks-c.cached) + p.QueueWeight*(float64(q)/bs+float64(c.st.pendingBlocks)),
			QueueCostPerToken: p.QueueWeight / bs,
		})
	}
	slices.SortStableFunc(out, func(a, b *routerv1.RankedWorker) int {
		return cmp.Or(cmp.Compare(a.Cost, b.Cost), cmp.Compare(a.Worker.GetId(), b.Worker.GetId()))
	})
	// Ties shuffled as the router does, for the groups that begin within those
	// kept, and only those kept returned.
	for i := 0; i < len(out) && i < MaxRankedPrefill; {
		j := i + 1
		for j < len(out) && out[j].GetCost() == out[i].GetCost() {
			j++
		}
		for k := j - 1; k > i; k-- {
			m := i + r.rng.IntN(k-i+1)
			out[k], out[m] = out[m], out[k]
		}
		i = j
	}
	return out[:min(len(out), MaxRankedPrefill)]
}

func refCountScored(cs []refCandidate) int {
	n := 0
	for _, c := range cs {
		if c.scored {
			n++
		}
	}
	return n
}

func (r *Router) refExplain(p Params, effective int, class string, cs []refCandidate, chosen, promptBlocks int) *routerv1.Explanation {
	e := &routerv1.Explanation{
		EffectiveTokens: uint32(effective), IslThreshold: uint32(r.threshold), GateClass: class, Temperature: p.Temperature,
	}
	for i, c := range cs {
		e.Candidates = append(e.Candidates, &routerv1.CandidateCost{
			Worker: workerProto(c.st.w), CachedBlocks: uint32(c.cached), UncachedBlocks: uint32(promptBlocks - c.cached),
			PrefillTerm: c.prefill, DecodeTerm: c.decode, QueueTerm: c.queue, Cost: c.cost, Note: c.note, Chosen: i == chosen,
		})
	}
	return e
}
