package router

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/codes"

	"github.com/tandem-serve/tandem/internal/spans"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
)

// candidate is a worker as the scoring pass leaves it for one request; the terms of
// its cost are worked out again only to explain a decision.
type candidate struct {
	st     *state
	cost   float64
	cached int32 // leading prompt blocks it holds
	pos    int32 // st.pos, for sorting candidates in id order without reading st
	flags  candFlags
}

type candFlags uint8

const (
	inClass candFlags = 1 << iota // in the gating class, or gating is off
	fits                          // free blocks for the request, or no report says otherwise
)

// The gating classes, by which the gate counters are cached.
const (
	classAll = iota
	classLocal
	classDisagg
	classFallback
	numClasses
)

var classNames = [numClasses]string{"all", "local", "disagg", "fallback-all"}

// tally is what the scoring pass learns of the decode candidates, kept by their
// candFlags, so that gating, the busy check and the argmin each need no pass of
// their own: the workers scored are those whose flags include a mask decided
// afterwards. The pass runs once per candidate per request, so it counts in
// registers and stores a minimum only when it falls. (Costs are finite: the
// parameters are validated and the loads are counts.)
type tally struct {
	n                     [4]int
	lo                    [4]float64
	bestLocal, bestDisagg float64
	// For the adaptive threshold: the least running sequences x uncached blocks
	// among the local workers at bestLocal, and the least prefill queue term.
	stalled, prefillQueue float64
}

// among returns how many candidates have every flag in need, and their least cost.
func (t *tally) among(need candFlags) (n int, lo float64) {
	lo = math.Inf(1)
	for f := range candFlags(len(t.n)) {
		if f&need == need {
			n, lo = n+t.n[f], min(lo, t.lo[f])
		}
	}
	return n, lo
}

// Route picks the decode worker for a request and ranks the prefill workers.
//
// Decode candidates cost prefill_weight x uncached prompt blocks + active decode
// blocks + queue_weight x (blocks waiting to prefill + blocks routed there since
// its last report). With gating on, only one class of worker is scored, chosen by
// the effective prompt length (prompt minus the best cached prefix); an empty class
// falls back to every worker. A worker without free blocks for the request is
// skipped unless none has them. The pick is the argmin at temperature 0 (ties at
// random), else a softmax over normalised costs.
func (r *Router) Route(ctx context.Context, req *connect.Request[routerv1.RouteRequest]) (*connect.Response[routerv1.RouteResponse], error) {
	start := time.Now()
	_, span := spans.Start(ctx, "router.decide")
	defer span.End()
	m := req.Msg
	if m.GetPromptTokens() == 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("prompt_tokens: must be positive"))
	}
	// The block size is the model card's, which the frontend sends: the router
	// needs no flag of its own to agree with the workers (a GPU engine's may be
	// 32 or 64).
	bs := r.cfg.BlockSize
	if b := m.GetBlockSize(); b != 0 {
		if b > maxBlockSize {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("block_size: %d tokens, more than %d", b, maxBlockSize))
		}
		bs = int(b)
	}
	if full := int(m.GetPromptTokens()) / bs; len(m.GetBlockHashes()) > full {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("block_hashes: %d hashes for %d prompt tokens (%d full blocks)",
			len(m.GetBlockHashes()), m.GetPromptTokens(), full))
	}
	promptBlocks := (int(m.GetPromptTokens()) + bs - 1) / bs

	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.params
	r.requests++
	if bs != r.blockSize {
		// The model card's block size differs from the one loads were divided by
		// (the first request, or another model): queued tokens in blocks again.
		r.blockSize = bs
		for _, st := range r.order {
			st.waitingBlocks = float64(st.waiting) / float64(bs)
		}
		r.reindexAll()
	}
	excluded := r.excluded[:0]
	for _, id := range m.GetExcludeWorkerIds() {
		if st := r.workers[id]; st != nil && st.excluded != r.requests {
			st.excluded = r.requests
			excluded = append(excluded, st)
		}
	}
	r.excluded = excluded
	cached, best := r.match(m.GetBlockHashes())
	effective := max(0, int(m.GetPromptTokens())-best*bs)
	r.traffic.note(int(m.GetPromptTokens()), effective)
	gateClass, want := classAll, kindDecodes
	if p.ISLGate {
		gateClass, want = classDisagg, kindDisagg
		if effective < r.threshold {
			gateClass, want = classLocal, kindLocal
		}
	}

	fp := m.GetModelFingerprint()
	model := r.fingerprints[fp] // 0, no worker's, when none has reported fp
	var (
		ch         choice
		prefillers []candidate
		pass       passResult // what an explanation needs, from the full pass only
		err        error
	)
	decide := func() {
		// With lenders putting prefill first, a lender decodes only a prompt whose
		// part it does not hold is below the threshold: it would otherwise prefill a
		// long prompt in its decode steps, which is what it lends to spare decode
		// workers. That test is per worker, so a prompt as long as the threshold
		// takes the full pass while any lender is a decode candidate.
		lenderRule := p.LendersPrefillFirst && r.decLend > 0 && promptBlocks*bs >= r.threshold
		// A recording span wants every candidate's cost, which only the full pass
		// works out; it decides as the load order would.
		if !lenderRule && r.byLoad(p, m.GetExplain() || span.IsRecording(), fp, model) {
			var ok bool
			r.metrics.path[0].Inc()
			if ch, prefillers, ok = r.decideByLoad(p, m.GetRequestId(), cached, excluded, gateClass, want, promptBlocks, bs, effective); !ok {
				err = connect.NewError(connect.CodeUnavailable, errors.New("no decode worker is available"))
			}
		} else {
			r.metrics.path[1].Inc()
			ch, prefillers, pass, err = r.decideByPass(p, m.GetRequestId(), cached, gateClass, want, fp, model, promptBlocks, bs, effective)
		}
	}
	decide()
	if err != nil && r.dropRoles() {
		// The planner's roles left no worker to decode (the decode workers left
		// or drain): every lender decodes again until the planner says otherwise.
		err = nil
		decide()
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return nil, err
	}
	win := &ch.win
	// The reply in one allocation (reply), its ranked prefill workers in another
	// and its reason in a third: the decision itself allocates nothing.
	out := new(reply)
	resp := &out.msg
	setWorkerProto(&out.decode, win.st.w)
	resp.DecodeWorker = &out.decode
	resp.PrefillWorkers = r.rankPrefill(p, prefillers, win.st, promptBlocks, bs, &out.ranked)
	resp.DecodeCachedBlocks = uint32(win.cached)
	resp.Reason = r.reasonFor(win, promptBlocks, ch.scored, classNames[ch.class], effective)
	if m.GetExplain() {
		// Before the winner's pending blocks grow: the terms shown are those it won with.
		resp.Explanation = r.explain(p, effective, gateClass, ch.class, pass.need, pass.decoders, pass.chosen, promptBlocks, bs)
	}
	if span.IsRecording() {
		traceDecision(span, resp, win.cost, ch.scored, classNames[ch.class], effective)
		traceCandidates(span, pass.decoders, pass.need)
	}
	win.st.pendingBlocks += promptBlocks - int(win.cached)
	r.reindex(win.st)
	if win.st.routed == nil {
		win.st.routed = r.metrics.routed.WithLabelValues(win.st.w.ID)
	}
	win.st.routed.Inc()
	win.st.routedTotal++
	r.gateCounter(ch.class).Inc()
	r.metrics.cachedBlocks.Observe(float64(win.cached))
	r.metrics.latency.Observe(time.Since(start).Seconds())
	out.resp.Msg = resp // as connect.NewResponse does: headers are made when asked for
	return &out.resp, nil
}

// reply is a route reply's fixed part, allocated at once: the ranked prefill
// workers' messages are allocated as many as there are (rankPrefill), the reason
// is a string. Seven objects per decision before, three now.
type reply struct {
	resp   connect.Response[routerv1.RouteResponse]
	msg    routerv1.RouteResponse
	decode routerv1.Worker
	ranked [MaxRankedPrefill]*routerv1.RankedWorker
}

// passResult is what the full pass leaves for an explanation.
type passResult struct {
	need     candFlags
	decoders []candidate
	chosen   int
}

// decideByPass scores every worker in one pass: the decision at any temperature,
// for an explanation, and among workers of several models.
func (r *Router) decideByPass(p Params, reqID string, cached []int32, gateClass int, want workerKind, fp string, model uint32,
	promptBlocks, bs, effective int) (choice, []candidate, passResult, error) {
	// One pass over the workers scores every decode candidate; what is decided
	// from all of them at once is settled from the tally afterwards.
	decoders, prefillers := r.decoders[:0], r.prefills[:0]
	defer func() { r.decoders, r.prefills = decoders[:0], prefillers[:0] }()
	inf := math.Inf(1)
	t := tally{lo: [4]float64{inf, inf, inf, inf}, bestLocal: inf, bestDisagg: inf, prefillQueue: inf}
	adaptive := p.ISLGate && p.ISLAdaptive
	nIn, nFits, nBoth := 0, 0, 0
	otherWeights := 0
	for _, st := range r.order {
		// A worker waiting for a resync is still a healthy member: it is routable,
		// with no cache credited until its snapshot arrives.
		if st.excluded == r.requests {
			continue
		}
		if fp != "" && st.model != model {
			// Another model's worker: its KV and its tokens mean nothing to this one.
			otherWeights++
			r.refuseWeights(st)
			continue
		}
		c := candidate{st: st, cached: cached[st.ref], pos: int32(st.pos)}
		if st.kind&kindPrefill != 0 {
			// A prefill worker, or a lender (it also decodes, below).
			prefillers = append(prefillers, c)
			if adaptive {
				t.prefillQueue = min(t.prefillQueue, prefillLoad(p, st))
			}
		}
		if st.kind&kindDecodes == 0 {
			continue
		}
		if p.LendersPrefillFirst && st.w.LendsPrefill && (promptBlocks-int(c.cached))*bs >= r.threshold {
			continue // a lender decodes only prompts it would prefill quickly (Route)
		}
		pre, dec, q := terms(p, st, int(c.cached), promptBlocks, bs)
		c.cost = pre + dec + q
		in, fit := 0, 0
		if st.kind&want != 0 {
			in = 1
		}
		if st.total == 0 || int(st.free)-st.pendingBlocks >= promptBlocks-int(c.cached) {
			fit = 1
		}
		nIn, nFits, nBoth = nIn+in, nFits+fit, nBoth+in&fit
		c.flags = candFlags(in) | candFlags(fit)<<1
		if c.cost < t.lo[c.flags] {
			t.lo[c.flags] = c.cost
		}
		if st.kind&kindLocal != 0 && c.cost <= t.bestLocal {
			stalled := float64(st.running) * float64(promptBlocks-int(c.cached))
			if c.cost < t.bestLocal {
				t.bestLocal, t.stalled = c.cost, stalled
			} else {
				t.stalled = min(t.stalled, stalled)
			}
		}
		if st.kind&kindDisagg != 0 && c.cost < t.bestDisagg {
			t.bestDisagg = c.cost
		}
		decoders = append(decoders, c)
	}
	t.n = [4]int{len(decoders) - nIn - nFits + nBoth, nIn - nBoth, nFits - nBoth, nBoth}
	if len(decoders) == 0 {
		if otherWeights > 0 {
			return choice{}, nil, passResult{}, connect.NewError(connect.CodeUnavailable, fmt.Errorf(
				"no decode worker serves model fingerprint %s (%d workers serve other weights)", fp, otherWeights))
		}
		return choice{}, nil, passResult{}, connect.NewError(connect.CodeUnavailable, errors.New("no decode worker is available"))
	}

	class, need := gateClass, candFlags(0)
	if p.ISLGate {
		if n, _ := t.among(inClass); n > 0 {
			need = inClass
		} else {
			class = classFallback
		}
	}
	if adaptive {
		local, disagg := adaptCosts(p, t.bestLocal, t.stalled, t.bestDisagg, t.prefillQueue)
		r.adapt(p, reqID, effective, local, disagg)
	}
	if n, _ := t.among(need | fits); n > 0 {
		need |= fits
	} else {
		r.metrics.busyFallback.Inc()
	}
	scored, lo := t.among(need)
	chosen := r.pick(p, decoders, need, lo)
	if chosen < 0 {
		return choice{}, nil, passResult{}, connect.NewError(connect.CodeUnavailable, errors.New("no decode worker could be scored"))
	}
	return choice{win: decoders[chosen], scored: scored, class: class}, prefillers,
		passResult{need: need, decoders: decoders, chosen: chosen}, nil
}

// match returns the leading prompt blocks each index slot holds, and the most that
// any routable decode worker holds.
func (r *Router) match(hashes []uint64) ([]int32, int) {
	if cap(r.scratch) < r.ix.Slots() {
		r.scratch = make([]int32, r.ix.Slots())
	}
	cached := r.scratch[:r.ix.Slots()]
	clear(cached)
	hits := r.hits[:0]
	r.ix.Match(hashes, func(ref workerRef, n int) {
		cached[ref] = int32(n)
		hits = append(hits, int(ref))
	})
	r.hits = hits
	best := 0
	for _, ref := range hits {
		if st := r.byRef[ref]; st != nil && st.kind&kindDecodes != 0 && st.excluded != r.requests {
			best = max(best, int(cached[ref]))
		}
	}
	return cached, best
}

// terms are the parts of a decode candidate's cost.
func terms(p Params, st *state, cached, promptBlocks, bs int) (prefill, decode, queue float64) {
	prefill = p.PrefillWeight * float64(promptBlocks-cached)
	decode = float64(st.active)
	queue = p.QueueWeight * (st.waitingBlocks + float64(st.pendingBlocks))
	return prefill, decode, queue
}

// refuseWeights counts a worker passed over for serving other weights.
func (r *Router) refuseWeights(st *state) {
	if st.skipped == nil {
		st.skipped = r.metrics.otherWeights.WithLabelValues(st.w.ID)
	}
	st.skipped.Inc()
}

func (r *Router) gateCounter(class int) prometheus.Counter {
	if r.gateCount[class] == nil {
		r.gateCount[class] = r.metrics.gate.WithLabelValues(classNames[class])
	}
	return r.gateCount[class]
}

// pick returns the index of the chosen candidate among those whose flags include
// need, given their least cost.
func (r *Router) pick(p Params, cs []candidate, need candFlags, lo float64) int {
	if math.IsInf(lo, 1) {
		return -1
	}
	hi := lo
	if p.Temperature != 0 {
		for _, c := range cs {
			if c.flags&need == need {
				hi = max(hi, c.cost)
			}
		}
	}
	if p.Temperature == 0 || hi == lo {
		n, chosen := 0, -1
		for i, c := range cs {
			if c.flags&need == need && c.cost == lo {
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
	weights := slices.Grow(r.weights[:0], len(cs))[:len(cs)]
	r.weights = weights
	for i, c := range cs {
		weights[i] = 0
		if c.flags&need == need {
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

// maxBlockSize bounds a request's block size: engines use 16 to 256 tokens.
const maxBlockSize = 1 << 12

// reasonFor is the decision in a line. It is built by hand: fmt.Sprintf was a
// measurable part of every decision.
func (r *Router) reasonFor(win *candidate, promptBlocks, scored int, class string, effective int) string {
	b := append(r.reason[:0], "cost "...)
	b = strconv.AppendFloat(b, win.cost, 'f', 1, 64)
	b = append(b, " (cached "...)
	b = strconv.AppendInt(b, int64(win.cached), 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(promptBlocks), 10)
	b = append(b, " blocks) lowest of "...)
	b = strconv.AppendInt(b, int64(scored), 10)
	b = append(b, " scored, class "...)
	b = append(b, class...)
	b = append(b, ", effective "...)
	b = strconv.AppendInt(b, int64(effective), 10)
	b = append(b, " tokens"...)
	r.reason = b
	return string(b)
}

// explain lists every decode candidate with its terms and why it was or was not
// scored: gateClass is the class the prompt length chose, class the one used.
func (r *Router) explain(p Params, effective, gateClass, class int, need candFlags, cs []candidate, chosen, promptBlocks, bs int) *routerv1.Explanation {
	e := &routerv1.Explanation{
		EffectiveTokens: uint32(effective), IslThreshold: uint32(r.threshold), GateClass: classNames[class], Temperature: p.Temperature,
	}
	for i, c := range cs {
		pre, dec, q := terms(p, c.st, int(c.cached), promptBlocks, bs)
		var note string
		switch {
		case class == classFallback:
			note = "class " + classNames[gateClass] + " is empty: scoring every worker"
		case c.flags&inClass == 0:
			note = "gated out: not in class " + classNames[gateClass]
		}
		if need&fits != 0 && c.flags&(need&^fits) == need&^fits && c.flags&fits == 0 {
			note = "busy: not enough free blocks"
		}
		if c.st.w.NoKVEvents {
			note = strings.TrimPrefix(note+"; no KV events from its engine: scored on load alone", "; ")
		}
		e.Candidates = append(e.Candidates, &routerv1.CandidateCost{
			Worker: workerProto(c.st.w), CachedBlocks: uint32(c.cached), UncachedBlocks: uint32(promptBlocks - int(c.cached)),
			PrefillTerm: pre, DecodeTerm: dec, QueueTerm: q, Cost: c.cost, Note: note, Chosen: i == chosen,
		})
	}
	return e
}
