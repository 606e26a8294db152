package estimate

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Live is what this worker knows of one sequence it streams: when its first
// token went out, how many it has sent, how many it may send, the recent gap
// between its tokens and its longest gaps. Only its own pump writes it; decisions read it.
type Live struct {
	start     time.Time    // when Generate began
	maxTokens int          // the most tokens it may emit; 0: unknown
	first     atomic.Int64 // unix nanoseconds of the first token; 0 before
	last      atomic.Int64 // unix nanoseconds of the latest token
	emitted   atomic.Int64
	gap       atomic.Uint64 // float64 bits: EWMA of the gap between tokens, seconds
	mu        sync.Mutex    // guards gaps: written by the pump, read by decisions
	gaps      topGaps       // its longest gaps, as many as its TBT averages
}

// Token records a token sent at now.
func (s *Live) Token(now time.Time) {
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

// Streams are the sequences this worker is streaming.
type Streams struct {
	mu  sync.Mutex
	set map[*Live]struct{}
	n   atomic.Int64 // len(set), read per token without the lock
}

// Count is how many streams are live here: the decode batch, with those still
// prefilling.
func (ss *Streams) Count() int { return int(ss.n.Load()) }

func (ss *Streams) Add(start time.Time, maxTokens int) (s *Live, remove func()) {
	s = &Live{start: start, maxTokens: maxTokens, gaps: newTopGaps(tbtCapacity(maxTokens))}
	ss.mu.Lock()
	if ss.set == nil {
		ss.set = map[*Live]struct{}{}
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

// Slack is the TPOT and TBT budget of the sequences decoding here.
type Slack struct {
	Decoding int // sequences past their first token
	// Lost are those of them that miss an SLO whatever is decided now: their
	// first token came after the TTFT objective, their TPOT slack is below 0,
	// or their TBT with no further stall is above the objective.
	Lost int
	Min  float64 // seconds; +Inf when no sequence has a TPOT to keep
	Step float64 // the step time assumed for their remaining tokens, seconds
	// Emitted and Remaining are the tightest sequence's.
	Emitted, Remaining int

	// TBT is the highest TBT projected, with the stretch, among the sequences
	// not lost (seconds; 0 with none, or no TBT objective); tbtK, tbtEmitted,
	// tbtRemaining and stretched (how many of its gaps the stretch lengthens)
	// are that sequence's.
	TBT                                       float64
	TBTK, TBTEmitted, TBTRemaining, Stretched int
	// Steps and Gap are the stretch as projected: Steps engine steps of Gap
	// seconds each.
	Steps int
	Gap   float64
	// Plain is the step model's figure for step, when learned; batch is the
	// batch step was taken at either way; stepFrom says where step came from.
	Plain    StepAt
	StepFrom string
	Fit      bool // step and gap are the engine's steps' fit
}

// Stretch is what a local prefill does to the sequences decoding beside it:
// it runs in steps engine steps (a chunk of at most the step's token budget
// each) that together take stall seconds, est.Local, of which compute are the
// prompt tokens' own (the line's per-token part, whatever the batch). plain
// is the step the batch will decode at, from the step model; when it has
// learned none, the sequences' recent gaps stand in for it.
type Stretch struct {
	Steps   int
	Stall   float64
	Compute float64
	Plain   StepAt
	// Fit, when OK, is the engine's own steps' fit: the plain step and the
	// stretched one both, in place of the above.
	Fit StepGuess
}

// Slack is, for each sequence past its first token, how many seconds of stall
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
func (ss *Streams) Slack(now time.Time, ttft, tpot, tbt, fallbackStep float64, st Stretch) Slack {
	ss.mu.Lock()
	type seq struct {
		lv              *Live
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
	out := Slack{Decoding: len(seqs), Min: math.Inf(1), Step: fallbackStep, Plain: st.Plain, StepFrom: "the local line's fixed cost"}
	switch {
	case st.Plain.Learned:
		out.Step, out.StepFrom = st.Plain.Seconds, "learned, "+st.Plain.From
	case len(gaps) > 0:
		slices.Sort(gaps)
		out.Step, out.StepFrom = gaps[len(gaps)/2], "the decoding sequences' median gap"
	}
	switch {
	case st.Fit.PlainOK:
		out.Step, out.StepFrom, out.Fit = st.Fit.Plain, st.Fit.String(), true
	case st.Fit.OK:
		// A plain step is no longer than a stretched one: the gaps' figure
		// (on a worker that never stops prefilling, stretched steps taken for
		// plain ones) is capped at the fit's.
		out.Step, out.StepFrom, out.Fit = min(out.Step, st.Fit.Gap), out.StepFrom+", at most "+st.Fit.String(), true
	}
	if st.Steps > 0 {
		out.Steps, out.Gap = st.Steps, max(out.Step, st.Stall/float64(st.Steps))
		switch {
		case st.Fit.OK:
			out.Gap = st.Fit.Gap
		case st.Plain.Learned:
			out.Gap = max(out.Gap, out.Step+max(st.Compute, 0)/float64(st.Steps))
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
			sl = tpot*float64(q.emitted+remaining-1) - elapsed - float64(remaining)*out.Step
		}
		var plain, stretched float64
		var k, n int
		if tbt > 0 {
			k = tbtK(q.emitted - 1 + remaining)
			n = min(out.Steps, remaining)
			q.lv.mu.Lock()
			top, observed := q.lv.gaps.g, q.lv.gaps.n
			plain = projectTBT(top, observed, k, 0, 0, remaining, out.Step)
			stretched = projectTBT(top, observed, k, n, out.Gap, remaining-n, out.Step)
			q.lv.mu.Unlock()
		}
		if sl < 0 || float64(q.first-q.start)/1e9 > ttft || plain > tbt && tbt > 0 {
			out.Lost++
			continue
		}
		if sl < out.Min {
			out.Min, out.Emitted, out.Remaining = sl, q.emitted, remaining
		}
		if tbt > 0 && stretched > out.TBT {
			out.TBT, out.TBTK, out.TBTEmitted, out.TBTRemaining, out.Stretched = stretched, k, q.emitted, remaining, n
		}
	}
	return out
}
