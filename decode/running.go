package decode

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// live is what this worker knows of one sequence it streams: when its first
// token went out, how many it has sent, how many it may send, the recent gap
// between its tokens and its longest gaps. Only its own pump writes it; decisions read it.
type live struct {
	start     time.Time    // when Generate began
	maxTokens int          // the most tokens it may emit; 0: unknown
	first     atomic.Int64 // unix nanoseconds of the first token; 0 before
	last      atomic.Int64 // unix nanoseconds of the latest token
	emitted   atomic.Int64
	gap       atomic.Uint64 // float64 bits: EWMA of the gap between tokens, seconds
	mu        sync.Mutex    // guards gaps: written by the pump, read by decisions
	gaps      topGaps       // its longest gaps, as many as its TBT averages
}

// token records a token sent at now.
func (s *live) token(now time.Time) {
	ns := now.UnixNano()
	if s.emitted.Add(1) == 1 {
		s.first.Store(ns)
	} else {
		g := float64(ns-s.last.Load()) / 1e9
		s.mu.Lock()
		s.gaps.add(g)
		s.mu.Unlock()
		if old := math.Float64frombits(s.gap.Load()); old > 0 {
			g = old + 0.2*(g-old)
		}
		s.gap.Store(math.Float64bits(g))
	}
	s.last.Store(ns)
}

// liveStreams are the sequences this worker is streaming.
type liveStreams struct {
	mu  sync.Mutex
	set map[*live]struct{}
	n   atomic.Int64 // len(set), read per token without the lock
}

// count is how many streams are live here: the decode batch, with those still
// prefilling.
func (ss *liveStreams) count() int { return int(ss.n.Load()) }

func (ss *liveStreams) add(start time.Time, maxTokens int) (s *live, remove func()) {
	s = &live{start: start, maxTokens: maxTokens, gaps: newTopGaps(tbtCapacity(maxTokens))}
	ss.mu.Lock()
	if ss.set == nil {
		ss.set = map[*live]struct{}{}
	}
	ss.set[s] = struct{}{}
	ss.n.Add(1)
	ss.mu.Unlock()
	return s, func() {
		ss.mu.Lock()
		if _, ok := ss.set[s]; ok {
			delete(ss.set, s)
			ss.n.Add(-1)
		}
		ss.mu.Unlock()
	}
}

// slack is the TPOT and TBT budget of the sequences decoding here.
type slack struct {
	decoding int // sequences past their first token
	// lost are those of them that miss an SLO whatever is decided now: their
	// first token came after the TTFT objective, their TPOT slack is below 0,
	// or their TBT with no further stall is above the objective.
	lost int
	min  float64 // seconds; +Inf when no sequence has a TPOT to keep
	step float64 // the step time assumed for their remaining tokens, seconds
	// emitted and remaining are the tightest sequence's.
	emitted, remaining int

	// tbt is the highest TBT projected, with the stretch, among the sequences
	// not lost (seconds; 0 with none, or no TBT objective); tbtK, tbtEmitted,
	// tbtRemaining and stretched (how many of its gaps the stretch lengthens)
	// are that sequence's.
	tbt                                       float64
	tbtK, tbtEmitted, tbtRemaining, stretched int
	// steps and gap are the stretch as projected: steps engine steps of gap
	// seconds each.
	steps int
	gap   float64
	// plain is the step model's figure for step, when learned; batch is the
	// batch step was taken at either way; stepFrom says where step came from.
	plain    stepAt
	stepFrom string
	fit      bool // step and gap are the engine's steps' fit
}

// stretch is what a local prefill does to the sequences decoding beside it:
// it runs in steps engine steps (a chunk of at most the step's token budget
// each) that together take stall seconds, est.Local, of which compute are the
// prompt tokens' own (the line's per-token part, whatever the batch). plain
// is the step the batch will decode at, from the step model; when it has
// learned none, the sequences' recent gaps stand in for it.
type stretch struct {
	steps   int
	stall   float64
	compute float64
	plain   stepAt
	// fit, when ok, is the engine's own steps' fit: the plain step and the
	// stretched one both, in place of the above.
	fit stepGuess
}

// slack is, for each sequence past its first token, how many seconds of stall
// it can take and still end with a TPOT (vLLM's: the mean gap after the first
// token) of at most tpot:
//
//	tpot·(emitted + remaining − 1) − (now − first) − remaining·step
//
// and the least of them. step is the plain step the step model learned at
// the batch the sequences will decode in (st.plain); while it has learned
// none there, the median of the sequences' recent token gaps (one device
// steps them all), or fallbackStep while none has a gap. A
// sequence whose max_tokens is unknown is assumed to have one token left (the
// stall may hit it without the rest of its answer to amortize it), and one whose
// stop token comes before max_tokens has its slack overstated by the tokens it
// will not emit.
//
// With a TBT objective (tbt > 0) it also projects each sequence's final TBT
// (projectTBT) were the stretch to come now: its kept longest gaps, st.steps
// stretched gaps (at most one per token it has left) and plain steps for the
// rest; and keeps the highest. A stretched gap is the whole step's time from
// the line, stall/steps (the line is fitted to the time of the steps a
// prefill ran in, decode batch included, so it holds a plain step), never less
// than a plain step; with a learned plain step, never less than that step plus
// the prompt's compute per step (st.compute/steps) either: the line's fixed
// cost per step is the decode batch's at whatever batches it was fitted, too
// little at a large batch. Not that sum alone: the line's fixed cost may also
// hold what a long chunk costs beyond its per-token slope (attention grows
// with the square of the chunk), which the sum alone would leave out. An
// engine that reports no step budget (Chunk 0) gives one step: the whole stall
// in one gap, the worst case. An engine that reports its steps replaces all
// of this with the fit to them (st.fit, stepfit.go): the stretched step at
// the prompt's fullest chunk, and the plain one where the fit can tell it.
//
// A sequence that misses an SLO whatever is decided (its TTFT above ttft, its
// TPOT slack already below 0, or its TBT above tbt with no stall at all) is
// counted as lost and sets no budget: holding every local prefill back for a
// request that cannot meet its objectives any more would cost the others
// theirs and save nothing.
func (ss *liveStreams) slack(now time.Time, ttft, tpot, tbt, fallbackStep float64, st stretch) slack {
	ss.mu.Lock()
	type seq struct {
		lv              *live
		start, first    int64
		emitted, budget int
		gap             float64
	}
	seqs := make([]seq, 0, len(ss.set))
	var gaps []float64
	for s := range ss.set {
		e := int(s.emitted.Load())
		if e == 0 {
			continue
		}
		q := seq{lv: s, start: s.start.UnixNano(), first: s.first.Load(), emitted: e, budget: s.maxTokens, gap: math.Float64frombits(s.gap.Load())}
		seqs = append(seqs, q)
		if q.gap > 0 {
			gaps = append(gaps, q.gap)
		}
	}
	ss.mu.Unlock()
	out := slack{decoding: len(seqs), min: math.Inf(1), step: fallbackStep, plain: st.plain, stepFrom: "the local line's fixed cost"}
	switch {
	case st.plain.learned:
		out.step, out.stepFrom = st.plain.seconds, "learned, "+st.plain.from
	case len(gaps) > 0:
		slices.Sort(gaps)
		out.step, out.stepFrom = gaps[len(gaps)/2], "the decoding sequences' median gap"
	}
	switch {
	case st.fit.plainOK:
		out.step, out.stepFrom, out.fit = st.fit.plain, st.fit.String(), true
	case st.fit.ok:
		// A plain step is no longer than a stretched one: the gaps' figure
		// (on a worker that never stops prefilling, stretched steps taken for
		// plain ones) is capped at the fit's.
		out.step, out.stepFrom, out.fit = min(out.step, st.fit.gap), out.stepFrom+", at most "+st.fit.String(), true
	}
	if st.steps > 0 {
		out.steps, out.gap = st.steps, max(out.step, st.stall/float64(st.steps))
		switch {
		case st.fit.ok:
			out.gap = st.fit.gap
		case st.plain.learned:
			out.gap = max(out.gap, out.step+max(st.compute, 0)/float64(st.steps))
		}
	}
	for _, q := range seqs {
		remaining := 1
		if q.budget > 0 {
			remaining = q.budget - q.emitted
		}
		if remaining <= 0 || q.emitted+remaining-1 <= 0 {
			continue // done, or a single token: no TPOT
		}
		elapsed := float64(now.UnixNano()-q.first) / 1e9
		sl := math.Inf(1) // no TPOT objective (tpot 0): no budget from it
		if tpot > 0 {
			sl = tpot*float64(q.emitted+remaining-1) - elapsed - float64(remaining)*out.step
		}
		var plain, stretched float64
		var k, n int
		if tbt > 0 {
			k = tbtK(q.emitted - 1 + remaining)
			n = min(out.steps, remaining)
			q.lv.mu.Lock()
			top, observed := q.lv.gaps.g, q.lv.gaps.n
			plain = projectTBT(top, observed, k, 0, 0, remaining, out.step)
			stretched = projectTBT(top, observed, k, n, out.gap, remaining-n, out.step)
			q.lv.mu.Unlock()
		}
		if sl < 0 || float64(q.first-q.start)/1e9 > ttft || plain > tbt && tbt > 0 {
			out.lost++
			continue
		}
		if sl < out.min {
			out.min, out.emitted, out.remaining = sl, q.emitted, remaining
		}
		if tbt > 0 && stretched > out.tbt {
			out.tbt, out.tbtK, out.tbtEmitted, out.tbtRemaining, out.stretched = stretched, k, q.emitted, remaining, n
		}
	}
	return out
}
