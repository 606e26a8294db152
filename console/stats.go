package console

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

const (
	// windowSeconds is the span of each tick's latency percentiles and cache check.
	windowSeconds = 60
	// historySeconds of ticks are kept for a page that connects late.
	historySeconds = 300
	// recentRequests are kept for the same.
	recentRequests = 50
	// maxSamples bounds the latencies kept of one second (a uniform sample of
	// them past that), so that a burst costs bounded memory and sorting.
	maxSamples = 512
)

// second is what the requests that ended within one second did.
type second struct {
	tick      Tick
	ttft, itl sample
	cache     CacheCheck
}

// sample is a uniform sample of at most maxSamples values (reservoir sampling).
type sample struct {
	v    []float64
	seen int
}

func (s *sample) add(x float64) {
	s.seen++
	if len(s.v) < maxSamples {
		s.v = append(s.v, x)
	} else if i := rand.IntN(s.seen); i < maxSamples {
		s.v[i] = x
	}
}

// stats turns requests into ticks.
type stats struct {
	cur    second
	window []second // the last windowSeconds closed seconds, oldest first
	ticks  []Tick   // the last historySeconds ticks, oldest first
	recent []Request
}

func (s *stats) add(r Request) {
	t := &s.cur.tick
	t.Requests++
	switch r.Path {
	case "local":
		t.Paths.Local++
	case "remote":
		t.Paths.Remote++
	case "fallback":
		t.Paths.Fallback++
	default:
		t.Paths.Unknown++
	}
	if t.Reasons == nil {
		t.Reasons = map[string]int{}
	}
	t.Reasons[r.Path+"/"+r.Reason]++
	if r.Finish == "" {
		t.Failed++
	}
	t.Tokens += r.Completion
	if r.TTFTMs > 0 {
		s.cur.ttft.add(r.TTFTMs)
	}
	if r.ITLMs > 0 {
		s.cur.itl.add(r.ITLMs)
	}
	s.cur.cache.Expected += r.RouteCached
	s.cur.cache.Found += r.DecodeCached
	s.recent = append(s.recent, r)
	if len(s.recent) > recentRequests {
		s.recent = slices.Delete(s.recent, 0, len(s.recent)-recentRequests)
	}
}

// close ends the current second at now and returns its tick, with percentiles
// over the window that ends with it.
func (s *stats) close(now time.Time, model string, threshold uint32) Tick {
	s.window = append(s.window, s.cur)
	if len(s.window) > windowSeconds {
		s.window = slices.Delete(s.window, 0, len(s.window)-windowSeconds)
	}
	t := s.cur.tick
	s.cur = second{}
	t.Time, t.Model, t.ISLThreshold = now.UnixMilli(), model, threshold
	if t.Reasons == nil {
		t.Reasons = map[string]int{}
	}
	var ttft, itl []float64
	nTTFT, nITL := 0, 0
	for _, sec := range s.window {
		ttft, itl = append(ttft, sec.ttft.v...), append(itl, sec.itl.v...)
		nTTFT, nITL = nTTFT+sec.ttft.seen, nITL+sec.itl.seen
		t.Cache.Expected += sec.cache.Expected
		t.Cache.Found += sec.cache.Found
	}
	// Count is every request's, not only the sampled ones'.
	t.TTFT, t.ITL = percentiles(ttft), percentiles(itl)
	t.TTFT.Count, t.ITL.Count = nTTFT, nITL
	s.ticks = append(s.ticks, t)
	if len(s.ticks) > historySeconds {
		s.ticks = slices.Delete(s.ticks, 0, len(s.ticks)-historySeconds)
	}
	return t
}

// percentiles of v by nearest rank; v is reordered.
func percentiles(v []float64) Percentiles {
	if len(v) == 0 {
		return Percentiles{}
	}
	slices.Sort(v)
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(v)))) - 1
		return round3(v[max(0, min(i, len(v)-1))])
	}
	return Percentiles{Count: len(v), P50: at(0.5), P90: at(0.9), P99: at(0.99)}
}

// round3 keeps three decimals: microseconds, in milliseconds.
func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

func (s *stats) history() History {
	return History{Ticks: slices.Clone(s.ticks), Requests: slices.Clone(s.recent)}
}
