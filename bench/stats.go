package bench

import (
	"fmt"
	"iter"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Percentile returns the p-th percentile (0 to 100) of sorted values by linear
// interpolation between the closest ranks, as numpy.percentile does by default
// (and so vLLM's bench): the value at rank p/100 * (n-1). It is NaN for no values.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	pos := p / 100 * float64(n-1)
	lo := int(math.Floor(pos))
	if lo >= n-1 {
		return sorted[n-1]
	}
	if lo < 0 {
		return sorted[0]
	}
	frac := pos - float64(lo)
	return sorted[lo] + frac*(sorted[lo+1]-sorted[lo])
}

// Dist summarises a latency distribution, in milliseconds.
type Dist struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Min  float64 `json:"min_ms"`
	Max  float64 `json:"max_ms"`
}

// NewDist summarises values given in milliseconds. It sorts values in place.
func NewDist(ms []float64) Dist {
	if len(ms) == 0 {
		return Dist{}
	}
	slices.Sort(ms)
	var sum float64
	for _, v := range ms {
		sum += v
	}
	return Dist{
		N: len(ms), Mean: sum / float64(len(ms)),
		P50: Percentile(ms, 50), P90: Percentile(ms, 90), P99: Percentile(ms, 99),
		Min: ms[0], Max: ms[len(ms)-1],
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// SLO is a set of latency objectives; a zero field is not an objective.
type SLO struct {
	TTFT time.Duration
	TPOT time.Duration
	// TBT is the Mooncake paper's time between tokens: the mean of the longest
	// tenth of a request's gaps (FAST'25, section 5.1), which a mean (TPOT) hides
	// and a pooled ITL percentile mixes across requests.
	TBT time.Duration
	E2E time.Duration
}

// ParseSLO parses objectives in milliseconds: "ttft=500,tpot=50" (vLLM's
// "ttft:500 tpot:50" is accepted too). Keys are ttft, tpot, tbt and e2e (or e2el).
func ParseSLO(s string) (SLO, error) {
	var slo SLO
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			k, v, ok = strings.Cut(f, ":")
		}
		if !ok {
			return SLO{}, fmt.Errorf("bench: SLO %q: want key=milliseconds, e.g. ttft=500", f)
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || !(x > 0) || math.IsInf(x, 0) {
			return SLO{}, fmt.Errorf("bench: SLO %q: the value must be a positive number of milliseconds", f)
		}
		d := time.Duration(x * float64(time.Millisecond))
		switch strings.ToLower(k) {
		case "ttft":
			slo.TTFT = d
		case "tpot":
			slo.TPOT = d
		case "tbt":
			slo.TBT = d
		case "e2e", "e2el":
			slo.E2E = d
		default:
			return SLO{}, fmt.Errorf("bench: SLO %q: unknown objective %q (known: ttft, tpot, tbt, e2e)", f, k)
		}
	}
	return slo, nil
}

// Set reports whether any objective is given.
func (s SLO) Set() bool { return s.TTFT > 0 || s.TPOT > 0 || s.TBT > 0 || s.E2E > 0 }

// String renders s the way ParseSLO reads it.
func (s SLO) String() string {
	var parts []string
	for _, o := range []struct {
		k string
		d time.Duration
	}{{"ttft", s.TTFT}, {"tpot", s.TPOT}, {"tbt", s.TBT}, {"e2e", s.E2E}} {
		if o.d > 0 {
			parts = append(parts, fmt.Sprintf("%s=%g", o.k, ms(o.d)))
		}
	}
	return strings.Join(parts, ",")
}

// Met reports whether a successful request meets every objective. As in vLLM, a
// request with a single output token has a TPOT of 0 for this purpose.
func (s SLO) Met(r *Result) bool {
	if !r.OK() {
		return false
	}
	tpot, _ := r.TPOT()
	return (s.TTFT == 0 || r.TTFT <= s.TTFT) &&
		(s.TPOT == 0 || tpot <= s.TPOT) &&
		(s.TBT == 0 || r.TBT() <= s.TBT) &&
		(s.E2E == 0 || r.E2E <= s.E2E)
}

// each yields, for each objective s sets, whether r met it.
func (s SLO) each(r *Result) iter.Seq2[string, bool] {
	return func(yield func(string, bool) bool) {
		tpot, _ := r.TPOT()
		for _, o := range []struct {
			k    string
			lim  time.Duration
			have time.Duration
		}{{"ttft", s.TTFT, r.TTFT}, {"tpot", s.TPOT, tpot}, {"tbt", s.TBT, r.TBT()}, {"e2e", s.E2E, r.E2E}} {
			if o.lim > 0 && !yield(o.k, r.OK() && o.have <= o.lim) {
				return
			}
		}
	}
}

// Summary is the report for a set of requests: a whole run or one class.
type Summary struct {
	Class string `json:"class"`
	// Requests counts the requests sent in the measured window; Completed and
	// Failed split them, and Aborted counts those cut short by a stop.
	Requests  int `json:"requests"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	Aborted   int `json:"aborted"`
	// DurationS is the measured window the throughputs divide by.
	DurationS float64 `json:"duration_s"`
	// InputTokens and OutputTokens total the completed requests.
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
	// CachedTokens totals the prompt tokens the server reported as cached
	// (usage.prompt_tokens_details.cached_tokens), and CacheHitRate is their
	// share of InputTokens: the prefix cache hit rate the servers saw.
	CachedTokens int     `json:"cached_tokens"`
	CacheHitRate float64 `json:"cache_hit_rate"`
	// CacheUnreported counts completed requests whose usage had no
	// prompt_tokens_details: their hits are unknown, not zero.
	CacheUnreported int `json:"cache_unreported,omitempty"`
	// ShortOutputs counts completed requests that enforced an output length
	// (ignore_eos) and got fewer tokens; ShortTokens totals what they missed.
	ShortOutputs int `json:"short_outputs,omitempty"`
	ShortTokens  int `json:"short_tokens,omitempty"`
	// RequestThroughput is completed requests per second; OutputThroughput is
	// output tokens per second; TotalTokenThroughput adds the prompt tokens.
	RequestThroughput    float64 `json:"request_throughput"`
	OutputThroughput     float64 `json:"output_throughput"`
	TotalTokenThroughput float64 `json:"total_token_throughput"`
	// GoodRequests meet every SLO; Goodput is their rate per second. Both are
	// absent without an SLO.
	GoodRequests *int     `json:"good_requests,omitempty"`
	Goodput      *float64 `json:"goodput,omitempty"`
	// Attainment is the share of the requests sent (aborted ones aside) that met
	// each objective ("ttft", "tpot", "tbt", "e2e") and all of them ("all"); a failed
	// request meets none. Absent without an SLO.
	Attainment map[string]float64 `json:"slo_attainment,omitempty"`
	TTFT       Dist               `json:"ttft"`
	TPOT       Dist               `json:"tpot"`
	// TBT holds each request's Mooncake TBT (SLO.TBT), one value per request
	// with at least one gap.
	TBT Dist `json:"tbt"`
	ITL Dist `json:"itl"`
	E2E Dist `json:"e2e"`
	// PrefillPaths counts completed requests by x-tandem-prefill-path ("none" when
	// the server did not say).
	PrefillPaths map[string]int `json:"prefill_paths"`
	// Errors counts failures by message.
	Errors map[string]int `json:"errors,omitempty"`
}

// Summarize computes the report for results over a window of duration, with
// goodput under slo when it sets any objective. Warm-up results are skipped.
func Summarize(class string, results []Result, duration time.Duration, slo SLO) Summary {
	s := Summary{Class: class, DurationS: duration.Seconds(), PrefillPaths: map[string]int{}}
	var ttft, tpot, tbt, itl, e2e []float64
	good := 0
	met := map[string]int{}
	for i := range results {
		r := &results[i]
		if r.Warmup {
			continue
		}
		s.Requests++
		switch {
		case r.Aborted:
			s.Aborted++
			continue
		case r.Err != "":
			s.Failed++
			if s.Errors == nil {
				s.Errors = map[string]int{}
			}
			s.Errors[r.Err]++
			continue
		}
		s.Completed++
		s.InputTokens += r.PromptTokens
		s.OutputTokens += r.OutputTokens
		s.CachedTokens += r.CachedTokens
		if !r.CachedReported {
			s.CacheUnreported++
		}
		if r.Short() {
			s.ShortOutputs++
			s.ShortTokens += r.WantTokens - r.OutputTokens
		}
		ttft = append(ttft, ms(r.TTFT))
		e2e = append(e2e, ms(r.E2E))
		if t, ok := r.TPOT(); ok {
			tpot = append(tpot, ms(t))
		}
		for _, g := range r.ITL {
			itl = append(itl, ms(g))
		}
		if len(r.ITL) > 0 {
			tbt = append(tbt, ms(r.TBT()))
		}
		path := r.PrefillPath
		if path == "" {
			path = "none"
		}
		s.PrefillPaths[path]++
		if slo.Set() && slo.Met(r) {
			good++
		}
		for k, ok := range slo.each(r) {
			if ok {
				met[k]++
			}
		}
	}
	if s.InputTokens > 0 {
		s.CacheHitRate = float64(s.CachedTokens) / float64(s.InputTokens)
	}
	if d := duration.Seconds(); d > 0 {
		s.RequestThroughput = float64(s.Completed) / d
		s.OutputThroughput = float64(s.OutputTokens) / d
		s.TotalTokenThroughput = float64(s.InputTokens+s.OutputTokens) / d
	}
	if slo.Set() {
		gp := 0.0
		if d := duration.Seconds(); d > 0 {
			gp = float64(good) / d
		}
		s.GoodRequests, s.Goodput = &good, &gp
		s.Attainment = map[string]float64{}
		for k := range slo.each(&Result{}) {
			s.Attainment[k] = 0
			if n := s.Requests - s.Aborted; n > 0 {
				s.Attainment[k] = float64(met[k]) / float64(n)
			}
		}
		if n := s.Requests - s.Aborted; n > 0 {
			s.Attainment["all"] = float64(good) / float64(n)
		} else {
			s.Attainment["all"] = 0
		}
	}
	s.TTFT, s.TPOT, s.TBT, s.ITL, s.E2E = NewDist(ttft), NewDist(tpot), NewDist(tbt), NewDist(itl), NewDist(e2e)
	return s
}

// Latencies returns the TTFTs and the pooled ITLs of the completed, measured
// requests, in milliseconds, for charts.
func Latencies(results []Result) (ttft, itl []float64) {
	for i := range results {
		r := &results[i]
		if r.Warmup || !r.OK() {
			continue
		}
		ttft = append(ttft, ms(r.TTFT))
		for _, g := range r.ITL {
			itl = append(itl, ms(g))
		}
	}
	return ttft, itl
}
