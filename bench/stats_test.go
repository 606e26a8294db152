package bench

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestPercentileInterpolatesLikeNumpy(t *testing.T) {
	// numpy.percentile([1, 2, 3, 4], q): rank q/100 * 3, linear between ranks.
	s := []float64{1, 2, 3, 4}
	for _, c := range []struct{ p, want float64 }{
		{0, 1}, {50, 2.5}, {90, 3.7}, {99, 3.97}, {100, 4}, {25, 1.75},
	} {
		if got := Percentile(s, c.p); !near(got, c.want) {
			t.Errorf("Percentile(%v, %v) = %v, want %v", s, c.p, got, c.want)
		}
	}
	if got := Percentile([]float64{7}, 99); got != 7 {
		t.Errorf("one value: got %v, want 7", got)
	}
	if got := Percentile(nil, 50); !math.IsNaN(got) {
		t.Errorf("no values: got %v, want NaN", got)
	}
}

func TestNewDistSortsAndSummarises(t *testing.T) {
	d := NewDist([]float64{40, 10, 30, 20})
	want := Dist{N: 4, Mean: 25, P50: 25, P90: 37, P99: 39.7, Min: 10, Max: 40}
	if !near(d.Mean, want.Mean) || !near(d.P50, want.P50) || !near(d.P90, want.P90) || !near(d.P99, want.P99) ||
		d.N != want.N || d.Min != want.Min || d.Max != want.Max {
		t.Errorf("NewDist = %+v, want %+v", d, want)
	}
	if (NewDist(nil) != Dist{}) {
		t.Error("NewDist(nil) is not the zero Dist")
	}
}

func TestTPOT(t *testing.T) {
	r := Result{TTFT: 100 * time.Millisecond, E2E: 1000 * time.Millisecond, OutputTokens: 10}
	if got, ok := r.TPOT(); !ok || got != 100*time.Millisecond {
		t.Errorf("TPOT = %v, %v; want (1000-100)/(10-1) = 100ms", got, ok)
	}
	r = Result{TTFT: 50 * time.Millisecond, E2E: 290 * time.Millisecond, OutputTokens: 4}
	if got, ok := r.TPOT(); !ok || got != 80*time.Millisecond {
		t.Errorf("TPOT = %v, %v; want (290-50)/3 = 80ms", got, ok)
	}
	r.OutputTokens = 1
	if _, ok := r.TPOT(); ok {
		t.Error("a one-token answer has a TPOT")
	}
}

func TestTBTIsTheMeanOfTheLongestTenthOfGaps(t *testing.T) {
	// 20 gaps: 18 of 10 ms and two stalls of 300 and 500 ms. TPOT averages the
	// stalls away (~50 ms); Mooncake's TBT is the mean of the longest two, 400 ms.
	r := Result{ITL: append(gaps(18, 10*time.Millisecond), 500*time.Millisecond, 300*time.Millisecond)}
	if got := r.TBT(); got != 400*time.Millisecond {
		t.Errorf("TBT = %v, want 400ms", got)
	}
	// Fewer than ten gaps: the longest one.
	r = Result{ITL: []time.Duration{5 * time.Millisecond, 70 * time.Millisecond, 20 * time.Millisecond}}
	if got := r.TBT(); got != 70*time.Millisecond {
		t.Errorf("TBT of 3 gaps = %v, want 70ms", got)
	}
	if got := (&Result{}).TBT(); got != 0 {
		t.Errorf("TBT without gaps = %v", got)
	}
	slo, err := ParseSLO("ttft=30000,tbt=100")
	if err != nil || slo.TBT != 100*time.Millisecond || slo.String() != "ttft=30000,tbt=100" {
		t.Fatalf("ParseSLO(tbt) = %+v %q, %v", slo, slo.String(), err)
	}
	ok := Result{TTFT: time.Second, E2E: 2 * time.Second, OutputTokens: 21, ITL: gaps(20, 50*time.Millisecond)}
	stalled := ok
	stalled.ITL = append(gaps(18, 20*time.Millisecond), 400*time.Millisecond, 200*time.Millisecond)
	if !slo.Met(&ok) || slo.Met(&stalled) {
		t.Errorf("Met: steady %v (want true), two stalls %v (want false)", slo.Met(&ok), slo.Met(&stalled))
	}
}

func gaps(n int, d time.Duration) []time.Duration {
	g := make([]time.Duration, n)
	for i := range g {
		g[i] = d
	}
	return g
}

// sample is the hand-computed example the summary tests share.
func sample() []Result {
	msec := time.Millisecond
	return []Result{
		// TPOT (1000-100)/9 = 100ms.
		{Class: "a", TTFT: 100 * msec, E2E: 1000 * msec, OutputTokens: 10, PromptTokens: 64, ITL: gaps(9, 100*msec), PrefillPath: "local"},
		// TPOT (700-300)/4 = 100ms.
		{Class: "b", TTFT: 300 * msec, E2E: 700 * msec, OutputTokens: 5, PromptTokens: 2048, ITL: gaps(4, 100*msec), PrefillPath: "remote"},
		// One token: no TPOT, counted as 0 for goodput.
		{Class: "a", TTFT: 50 * msec, E2E: 50 * msec, OutputTokens: 1, PromptTokens: 64},
		{Class: "b", Err: "HTTP 500: boom", E2E: 5 * msec},
		{Class: "a", Warmup: true, TTFT: 9 * time.Second, E2E: 9 * time.Second, OutputTokens: 99},
		{Class: "a", Aborted: true, Err: "context canceled"},
	}
}

func TestSummarizeByHand(t *testing.T) {
	slo, err := ParseSLO("ttft=200,tpot=100")
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize("all", sample(), 2*time.Second, slo)
	if s.Requests != 5 || s.Completed != 3 || s.Failed != 1 || s.Aborted != 1 {
		t.Errorf("counts: requests %d completed %d failed %d aborted %d; want 5 3 1 1", s.Requests, s.Completed, s.Failed, s.Aborted)
	}
	// 3 requests and 16 output tokens in 2 s.
	if !near(s.RequestThroughput, 1.5) || !near(s.OutputThroughput, 8) || !near(s.TotalTokenThroughput, (64+2048+64+16)/2.0) {
		t.Errorf("throughput: %v req/s, %v tok/s, %v total tok/s; want 1.5, 8, 1096", s.RequestThroughput, s.OutputThroughput, s.TotalTokenThroughput)
	}
	// Good: the first (TTFT 100 <= 200, TPOT 100 <= 100) and the one-token one;
	// the second misses TTFT (300 > 200).
	if s.GoodRequests == nil || *s.GoodRequests != 2 || !near(*s.Goodput, 1) {
		t.Errorf("goodput: %v requests, %v/s; want 2, 1/s", s.GoodRequests, s.Goodput)
	}
	// TTFT {50, 100, 300}: mean 150, p50 100, p90 at rank 1.8 = 100 + 0.8*200 = 260,
	// p99 at rank 1.98 = 296.
	if d := s.TTFT; d.N != 3 || !near(d.Mean, 150) || !near(d.P50, 100) || !near(d.P90, 260) || !near(d.P99, 296) {
		t.Errorf("TTFT = %+v", d)
	}
	if d := s.TPOT; d.N != 2 || !near(d.Mean, 100) || !near(d.P99, 100) {
		t.Errorf("TPOT = %+v; want two values of 100", d)
	}
	if d := s.ITL; d.N != 13 || !near(d.Mean, 100) {
		t.Errorf("ITL = %+v; want 13 pooled gaps of 100", d)
	}
	if d := s.E2E; d.N != 3 || !near(d.Mean, 1750.0/3) || !near(d.P50, 700) {
		t.Errorf("E2E = %+v", d)
	}
	if s.PrefillPaths["local"] != 1 || s.PrefillPaths["remote"] != 1 || s.PrefillPaths["none"] != 1 {
		t.Errorf("prefill paths = %v; want local 1, remote 1, none 1", s.PrefillPaths)
	}
	if s.Errors["HTTP 500: boom"] != 1 {
		t.Errorf("errors = %v", s.Errors)
	}
}

func TestGoodputCountsOnlyRequestsMeetingEverySLO(t *testing.T) {
	for _, c := range []struct {
		slo  string
		good int
	}{
		{"tpot=99", 1},            // only the one-token request (TPOT 0)
		{"ttft=100", 2},           // 100 and 50
		{"ttft=1000,tpot=100", 3}, // all three completed
		{"e2e=700", 2},            // 700 and 50
		{"ttft=60 tpot=100", 1},   // vLLM's spelling; only TTFT 50
	} {
		slo, err := ParseSLO(c.slo)
		if err != nil {
			t.Fatal(err)
		}
		s := Summarize("all", sample(), time.Second, slo)
		if *s.GoodRequests != c.good || !near(*s.Goodput, float64(c.good)) {
			t.Errorf("SLO %s: %d good, %v/s; want %d", c.slo, *s.GoodRequests, *s.Goodput, c.good)
		}
	}
	if s := Summarize("all", sample(), time.Second, SLO{}); s.Goodput != nil {
		t.Error("goodput reported without an SLO")
	}
}

func TestParseSLO(t *testing.T) {
	slo, err := ParseSLO("ttft=500,tpot=50")
	if err != nil || slo.TTFT != 500*time.Millisecond || slo.TPOT != 50*time.Millisecond || slo.E2E != 0 {
		t.Errorf("ParseSLO = %+v, %v", slo, err)
	}
	if slo.String() != "ttft=500,tpot=50" {
		t.Errorf("String() = %q", slo.String())
	}
	slo, err = ParseSLO("ttft:2.5 e2el:1000")
	if err != nil || slo.TTFT != 2500*time.Microsecond || slo.E2E != time.Second {
		t.Errorf("vLLM spelling: %+v, %v", slo, err)
	}
	for _, bad := range []string{"ttft", "itl=5", "ttft=-1", "ttft=0", "tpot=abc"} {
		if _, err := ParseSLO(bad); err == nil {
			t.Errorf("ParseSLO(%q) accepted", bad)
		} else if !strings.Contains(err.Error(), "SLO") {
			t.Errorf("ParseSLO(%q): error %q does not say SLO", bad, err)
		}
	}
}

func TestNaturalCompare(t *testing.T) {
	for _, c := range []struct {
		a, b string
		less bool
	}{{"turn-2", "turn-10", true}, {"turn-10", "turn-2", false}, {"64/32", "2048/64", true}, {"a", "b", true}} {
		if got := naturalCompare(c.a, c.b) < 0; got != c.less {
			t.Errorf("naturalCompare(%q, %q) < 0 = %v", c.a, c.b, got)
		}
	}
}

func TestReportSurvivesJSON(t *testing.T) {
	slo, _ := ParseSLO("ttft=200,tpot=100")
	rep := &Report{Results: sample()}
	rep.summarize(slo, 2*time.Second, nil)
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	back.RestoreResults()
	back.summarize(slo, 2*time.Second, nil)
	a, _ := json.Marshal(rep.Overall)
	c, _ := json.Marshal(back.Overall)
	if string(a) != string(c) {
		t.Errorf("summary after a JSON round trip differs:\n%s\n%s", a, c)
	}
	if len(back.Classes) != 2 || back.Classes[0].Class != "a" {
		t.Errorf("classes %+v", back.Classes)
	}
}

func TestSummarizeAttainmentHitRateAndShortfalls(t *testing.T) {
	slo, err := ParseSLO("ttft=200,tpot=100")
	if err != nil {
		t.Fatal(err)
	}
	rs := sample()
	if u := Summarize("all", rs, time.Second, SLO{}).CacheUnreported; u != 3 {
		t.Errorf("%d completed requests without prompt_tokens_details, want 3", u)
	}
	rs[0].CachedTokens, rs[1].CachedTokens = 32, 1024
	rs[0].CachedReported, rs[1].CachedReported, rs[2].CachedReported = true, true, true
	rs[1].WantTokens = 8 // got 5
	rs[0].WantTokens = 10
	s := Summarize("all", rs, 2*time.Second, slo)
	// Sent 5, one aborted: 4 count. TTFT met by the first and the one-token one
	// (the failed one meets nothing); TPOT by all three completed.
	want := map[string]float64{"ttft": 2.0 / 4, "tpot": 3.0 / 4, "all": 2.0 / 4}
	for k, v := range want {
		if got, ok := s.Attainment[k]; !ok || !near(got, v) {
			t.Errorf("attainment %s = %v (%v), want %v", k, got, ok, v)
		}
	}
	if _, ok := s.Attainment["e2e"]; ok || len(s.Attainment) != 3 {
		t.Errorf("attainment %v has objectives not set", s.Attainment)
	}
	if !near(s.CacheHitRate, float64(32+1024)/float64(64+2048+64)) {
		t.Errorf("cache hit rate %v", s.CacheHitRate)
	}
	if s.ShortOutputs != 1 || s.ShortTokens != 3 {
		t.Errorf("%d short requests, %d tokens; want 1, 3", s.ShortOutputs, s.ShortTokens)
	}
	var b strings.Builder
	rep := &Report{Workload: "w", SLO: slo.String(), Results: rs, TraceReuse: new(0.5)}
	rep.summarize(slo, 2*time.Second, nil)
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"SLO attainment (ttft=200,tpot=100; share of requests sent): ttft 50.0%, tpot 75.0%, all 50.0%",
		"prefix cache hit rate seen by the servers: 48.5% of prompt tokens (usage.prompt_tokens_details.cached_tokens); " +
			"the trace's own reuse (unbounded shared cache): 50.0%",
		"output length not met: 1 requests ended early, 3 tokens short in all",
	} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("the table lacks %q:\n%s", line, b.String())
		}
	}
}
