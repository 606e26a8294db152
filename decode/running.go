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
}

func (ss *liveStreams) add(start time.Time, maxTokens int) (s *live, remove func()) {
	s = &live{start: start, maxTokens: maxTokens, gaps: newTopGaps(tbtCapacity(maxTokens))}
	ss.mu.Lock()
	if ss.set == nil {
		ss.set = map[*live]struct{}{}
	}
	ss.set[s] = struct{}{}
	ss.mu.Unlock()
	return s, func() {
		ss.mu.Lock()
		delete(ss.set, s)
		ss.mu.Unlock()
	}
}

// slack is the TPOT budget of the sequences decoding here.
type slack struct {
	decoding int // sequences past their first token
	// lost are those of them that miss an SLO whatever is decided now: their
	// first token came after the TTFT objective, or their slack is below 0.
	lost int
	min  float64 // seconds; +Inf when no sequence has a TPOT to keep
	step float64 // the step time assumed for their remaining tokens, seconds
	// emitted and remaining are the tightest sequence's.
	emitted, remaining int
}

// slack is, for each sequence past its first token, how many seconds of stall
// it can take and still end with a TPOT (vLLM's: the mean gap after the first
// token) of at most tpot:
//
//	tpot·(emitted + remaining − 1) − (now − first) − remaining·step
//
// and the least of them. step is the median of the sequences' recent token
// gaps (one device steps them all), or fallbackStep while none has a gap. A
// sequence whose max_tokens is unknown is assumed to have one token left (the
// stall may hit it without the rest of its answer to amortize it), and one whose
// stop token comes before max_tokens has its slack overstated by the tokens it
// will not emit. A sequence that misses an SLO whatever is decided (its TTFT
// above ttft, or its slack already below 0) is counted as lost and does not
// set the least: holding every local prefill back for a request that cannot
// meet its objectives any more would cost the others theirs and save nothing.
func (ss *liveStreams) slack(now time.Time, ttft, tpot, fallbackStep float64) slack {
	ss.mu.Lock()
	type seq struct {
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
		q := seq{start: s.start.UnixNano(), first: s.first.Load(), emitted: e, budget: s.maxTokens, gap: math.Float64frombits(s.gap.Load())}
		seqs = append(seqs, q)
		if q.gap > 0 {
			gaps = append(gaps, q.gap)
		}
	}
	ss.mu.Unlock()
	out := slack{decoding: len(seqs), min: math.Inf(1), step: fallbackStep}
	if len(gaps) > 0 {
		slices.Sort(gaps)
		out.step = gaps[len(gaps)/2]
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
		if sl < 0 || float64(q.first-q.start)/1e9 > ttft {
			out.lost++
			continue
		}
		if sl < out.min {
			out.min, out.emitted, out.remaining = sl, q.emitted, remaining
		}
	}
	return out
}
