package console

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestPercentiles(t *testing.T) {
	var v []float64
	for i := 100; i >= 1; i-- {
		v = append(v, float64(i))
	}
	if p := percentiles(v); p != (Percentiles{Count: 100, P50: 50, P90: 90, P99: 99}) {
		t.Errorf("percentiles of 1..100: %+v", p)
	}
	if p := percentiles([]float64{7}); p != (Percentiles{Count: 1, P50: 7, P90: 7, P99: 7}) {
		t.Errorf("percentiles of one sample: %+v", p)
	}
	if p := percentiles(nil); p != (Percentiles{}) {
		t.Errorf("percentiles of nothing: %+v", p)
	}
}

// A tick's percentiles cover the last windowSeconds and no more; its counts cover
// its own second; the history keeps historySeconds of ticks.
func TestTicksWindow(t *testing.T) {
	var s stats
	now := time.Unix(1000, 0)
	s.add(Request{Path: "local", Reason: "below_threshold", TTFTMs: 500, Finish: "stop", Completion: 3})
	first := s.close(now, "m", 0)
	if first.Paths.Local != 1 || first.TTFT.P50 != 500 || first.Tokens != 3 || first.Reasons["local/below_threshold"] != 1 {
		t.Errorf("first tick %+v", first)
	}
	for i := 1; i < windowSeconds; i++ {
		s.add(Request{Path: "remote", TTFTMs: 10})
		tk := s.close(now.Add(time.Duration(i)*time.Second), "m", 0)
		if tk.Paths.Local != 0 || tk.Paths.Remote != 1 || tk.TTFT.Count != i+1 || tk.TTFT.P99 != 500 {
			t.Fatalf("tick %d: %+v", i, tk)
		}
	}
	// The slow first request leaves the window.
	tk := s.close(now.Add(windowSeconds*time.Second), "m", 0)
	if tk.TTFT.Count != windowSeconds-1 || tk.TTFT.P99 != 10 || tk.Requests != 0 {
		t.Errorf("after the window: %+v", tk)
	}
	for i := range historySeconds + 10 {
		s.close(now.Add(time.Duration(100+i)*time.Second), "m", 0)
	}
	if h := s.history(); len(h.Ticks) != historySeconds {
		t.Errorf("history keeps %d ticks, want %d", len(h.Ticks), historySeconds)
	}
}

// A burst keeps a bounded sample of its latencies, but counts every request.
func TestBurstIsSampled(t *testing.T) {
	var s stats
	for i := range 10 * maxSamples {
		s.add(Request{Path: "local", TTFTMs: float64(i%100 + 1)})
	}
	if n := len(s.cur.ttft.v); n != maxSamples {
		t.Errorf("kept %d samples of a burst, want %d", n, maxSamples)
	}
	tk := s.close(time.Unix(0, 0), "m", 0)
	if tk.TTFT.Count != 10*maxSamples || tk.Requests != 10*maxSamples || tk.TTFT.P50 < 30 || tk.TTFT.P50 > 70 {
		t.Errorf("burst tick %+v", tk)
	}
	if len(s.recent) != recentRequests {
		t.Errorf("%d recent requests kept, want %d", len(s.recent), recentRequests)
	}
}

// An event that cannot be encoded (a number that is not finite) becomes an error
// event naming it, not a panic in the request that produced it.
func TestUnencodableEvent(t *testing.T) {
	got := string(frame("request", Request{TTFTMs: math.NaN()}))
	if !strings.HasPrefix(got, "event: error\ndata: {\"event\":\"request\",\"error\":") || !strings.HasSuffix(got, "\n\n") {
		t.Errorf("frame of a NaN: %q", got)
	}
}
