// Package planner decides the shape of a fleet of role-flexible workers: how
// many prefill for the others, the prompt length from which a prompt is
// prefilled remotely, and when a change of shape pays for what it costs. It
// knows nothing of Consul or the router; it is given observations and says what
// it would do, and why.
package planner

import (
	"cmp"
	"math"
	"slices"

	"github.com/tandem-serve/tandem/engine/sim"
)

// Length is one class of traffic: a share of the requests with their
// effective (uncached) prompt length and output length, in tokens.
type Length struct {
	Share         float64
	PromptTokens  int
	OutputTokens  int
	CachedTokens  int // the prompt's part a worker holds already (not prefilled)
	ContextTokens int // prompt tokens held in KV while decoding (prompt and cached); 0: PromptTokens+CachedTokens
}

// Objectives are the latencies the plan is judged against.
type Objectives struct {
	TTFTMS, TBTMS float64
}

// Shape is a fleet split: Prefill workers serve only remote prefills, Decode
// workers decode every request and prefill locally the prompts shorter than
// Threshold (all of them when Prefill is 0).
type Shape struct {
	Prefill, Decode int
	Threshold       int
}

// Projection is what the model expects of a shape under a load: each
// objective's projected latency over its target (above 1, missed), and the
// larger of the two, the shape's score; lower is better.
// (JSON cannot carry an infinite score; the model gives none.)
type Projection struct {
	TTFT  float64 `json:"ttft"`
	TBT   float64 `json:"tbt"`
	Score float64 `json:"score"`
	// Capacity is the shape's projected capacity (Capacity), when the planner
	// computed it.
	Capacity float64 `json:"capacity,omitempty"`
}

// Project is the device model's expectation of shape under rate requests per
// second of lengths. It is a queueing roofline, not a simulation: the prefill
// pool is an M/M/c-like server whose wait grows as 1/(1-utilisation), and a
// decode worker's step stretches by the share of its time local prefills take.
// Its use is to rank shapes, not to predict latencies to the millisecond.
func Project(p *sim.Profile, shape Shape, rate float64, lengths []Length, obj Objectives) Projection {
	if shape.Decode < 1 || rate < 0 {
		return Projection{TTFT: math.Inf(1), TBT: math.Inf(1), Score: math.Inf(1)}
	}
	var (
		remoteMS, localMS       float64 // prefill work per second, ms
		remoteShare, localShare float64
		osl, ctx                float64 // mean output and context per request
		total                   float64
	)
	for _, l := range lengths {
		total += l.Share
	}
	if total <= 0 || rate == 0 {
		return Projection{}
	}
	cs := make([]class, 0, len(lengths))
	for _, l := range lengths {
		s := l.Share / total
		// Prompts share a step's fixed cost, MaxBatchedTokens of them to a step.
		ms := p.ChunkMS(l.CachedTokens, l.PromptTokens) + p.PrefillC*float64(l.PromptTokens)/float64(p.MaxBatchedTokens)
		c := class{share: s, ms: ms, remote: shape.Prefill > 0 && l.PromptTokens >= shape.Threshold}
		if c.remote {
			remoteMS += rate * s * ms
			remoteShare += s
		} else {
			localMS += rate * s * ms
			localShare += s
			c.chunk = p.ChunkMS(l.CachedTokens, min(l.PromptTokens, p.MaxBatchedTokens))
			c.chunks = math.Ceil(float64(l.PromptTokens) / float64(p.MaxBatchedTokens))
		}
		cs = append(cs, c)
		ctxTokens := l.ContextTokens
		if ctxTokens == 0 {
			ctxTokens = l.PromptTokens + l.CachedTokens
		}
		osl += s * float64(l.OutputTokens)
		ctx += s * (float64(ctxTokens) + float64(l.OutputTokens)/2)
	}
	// Decode: each decode worker runs rate*osl/D tokens a second; Little's law
	// gives the sequences in its batch at the projected step time, which sets
	// its KV usage and so its step time: a fixed point, a few rounds suffice.
	d := float64(shape.Decode)
	rho := localMS / (d * 1000) // share of a decode worker's time prefilling
	step, over := p.StepMS(1, 0, false, 0), 1.0
	for range 12 {
		batch := rate * osl / d * step / 1000
		u := batch * ctx / float64(p.KVTokens)
		// Past the batch or KV limit requests queue for a place: the shape is
		// overloaded by that much, which ranks the overloaded shapes.
		over = max(1, batch/float64(p.MaxNumSeqs), u)
		step = p.StepMS(max(1, min(int(batch), p.MaxNumSeqs)), min(u, 1), false, 0) * queue(rho)
	}
	// TBT is judged on a request's longest tenth of gaps (the objectives of
	// the benchmarks): the steps that carry a local prompt's chunk are its
	// long gaps, as often as such chunks come.
	tbt := tail(cs, func(c class) (float64, float64) {
		if c.remote || c.chunk <= 0 {
			return 0, 0
		}
		return rate * c.share * c.chunks / d * step / 1000, step + c.chunk
	}, step)
	if over > 1 {
		tbt = max(tbt, obj.TBTMS) * 2 * over
	}
	// TTFT: a prompt waits behind its pool's queue, then takes its own time;
	// the objective is met when at least 90 % meet it, so the tenth of
	// requests slowest to start sets it.
	rp := 0.0
	if shape.Prefill > 0 {
		rp = remoteMS / (float64(shape.Prefill) * 1000)
	}
	meanLocal, meanRemote := localMS/math.Max(1e-9, rate*localShare), remoteMS/math.Max(1e-9, rate*remoteShare)
	ttft := p90(cs, func(c class) float64 {
		if c.remote {
			return c.ms + meanRemote*(queue(rp)-1)
		}
		return c.ms + meanLocal*(queue(rho)-1) + step
	})
	pr := Projection{TTFT: ttft / obj.TTFTMS, TBT: tbt / obj.TBTMS}
	pr.Score = math.Max(pr.TTFT, pr.TBT)
	return pr
}

// queue is the stretch of a service time by waiting at utilisation rho:
// 1/(1-rho), and past 95 % a steep line rather than infinity, so that
// overloaded shapes still rank by how overloaded they are.
func queue(rho float64) float64 {
	if rho < 0.95 {
		return 1 / (1 - rho)
	}
	return 20 * (1 + 10*(rho-0.95))
}

// Capacity is the highest arrival rate at which the model expects shape to
// meet both objectives on lengths (a score of at most 1): the quantity bench
// compare measures. Ranking shapes by it rather than by their score at the
// current rate keeps the choice steady when that rate sits near a knee.
func Capacity(p *sim.Profile, shape Shape, lengths []Length, obj Objectives) float64 {
	ok := func(r float64) bool { return Project(p, shape, r, lengths, obj).Score <= 1 }
	lo, hi := 0.0, 1.0
	for ok(hi) {
		if lo, hi = hi, 2*hi; hi > 1e7 {
			return lo
		}
	}
	for range 24 {
		if m := (lo + hi) / 2; ok(m) {
			lo = m
		} else {
			hi = m
		}
	}
	return lo
}

// class is one length class of a projection.
type class struct {
	share, ms float64 // share of requests, prefill time alone
	remote    bool
	chunk     float64 // a local prompt's largest chunk, ms
	chunks    float64 // its chunks
}

// tail is the mean of the longest tenth of a request's token gaps: each class
// gives the share of gaps it lengthens and their length; the rest are base.
func tail(cs []class, gap func(class) (share, ms float64), base float64) float64 {
	type g struct{ share, ms float64 }
	var gs []g
	for _, c := range cs {
		if sh, ms := gap(c); sh > 0 {
			gs = append(gs, g{sh, ms})
		}
	}
	slices.SortFunc(gs, func(a, b g) int { return cmp.Compare(b.ms, a.ms) })
	left, sum := 0.1, 0.0
	for _, x := range gs {
		take := min(left, x.share)
		sum, left = sum+take*x.ms, left-take
		if left <= 0 {
			break
		}
	}
	return (sum + left*base) / 0.1
}

// p90 is the time to first token that 90 % of requests meet: the slowest
// classes' times, taken until a tenth of the requests is covered.
func p90(cs []class, ttft func(class) float64) float64 {
	type x struct{ share, ms float64 }
	xs := make([]x, 0, len(cs))
	for _, c := range cs {
		xs = append(xs, x{c.share, ttft(c)})
	}
	slices.SortFunc(xs, func(a, b x) int { return cmp.Compare(b.ms, a.ms) })
	covered := 0.0
	for _, v := range xs {
		if covered += v.share; covered > 0.1 {
			return v.ms
		}
	}
	if len(xs) == 0 {
		return 0
	}
	return xs[len(xs)-1].ms
}
