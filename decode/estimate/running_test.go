package estimate

import (
	"math"
	"testing"
	"time"
)

// The slack is tpot·(emitted + remaining − 1) − elapsed − remaining·step for the
// tightest sequence, step the median of the recent gaps; sequences that cannot
// meet an SLO any more are counted apart.
func TestLiveSlack(t *testing.T) {
	var ss Streams
	t0 := time.Unix(1000, 0)
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	// emit sends n tokens from first, gap apart.
	emit := func(lv *Live, first time.Time, n int, gap time.Duration) time.Time {
		at := first
		for i := range n {
			if i > 0 {
				at = at.Add(gap)
			}
			lv.Token(at)
		}
		return at
	}
	if sl := ss.Slack(t0, 2, 0.03, 0, 0.007, Stretch{}); sl.Decoding != 0 || !math.IsInf(sl.Min, 1) || sl.Step != 0.007 {
		t.Errorf("empty: %+v", sl)
	}
	// a: 11 tokens 10 ms apart, 90 to go; b: 21 tokens 10 ms apart, 9 to go.
	a, gone := ss.Add(t0, 101)
	emit(a, t0.Add(ms(100)), 11, ms(10))
	b, _ := ss.Add(t0, 30)
	emit(b, t0.Add(ms(50)), 21, ms(10))
	_, _ = ss.Add(t0, 100) // not started: not counted
	now := t0.Add(ms(300))
	sl := ss.Slack(now, 2, 0.03, 0, 0.007, Stretch{})
	// a: 0.03·100 − 0.2 − 90·0.01 = 1.9; b: 0.03·29 − 0.25 − 9·0.01 = 0.53.
	if sl.Decoding != 2 || sl.Lost != 0 || math.Abs(sl.Step-0.01) > 1e-9 || math.Abs(sl.Min-0.53) > 1e-9 || sl.Emitted != 21 || sl.Remaining != 9 {
		t.Errorf("two decoding: %+v, want min 0.53 (b: 21 emitted, 9 left), step 0.01", sl)
	}
	// c's first token came after the TTFT objective: lost, not the least.
	c, _ := ss.Add(t0.Add(-ms(2500)), 50)
	emit(c, t0.Add(ms(250)), 2, ms(10))
	if sl := ss.Slack(now, 2, 0.03, 0, 0.007, Stretch{}); sl.Lost != 1 || sl.Decoding != 3 || math.Abs(sl.Min-0.53) > 1e-9 {
		t.Errorf("late first token: %+v, want 1 lost of 3", sl)
	}
	// Without a max_tokens, one token is assumed left.
	ss2 := Streams{}
	d, _ := ss2.Add(t0, 0)
	emit(d, t0, 11, ms(20))
	// 0.03·11 − 0.2 − 1·0.02 = 0.11
	if sl := ss2.Slack(t0.Add(ms(200)), 2, 0.03, 0, 0.007, Stretch{}); math.Abs(sl.Min-0.11) > 1e-9 || sl.Remaining != 1 {
		t.Errorf("unknown max_tokens: %+v, want min 0.11 with 1 left", sl)
	}
	// Past its TPOT already (50 ms gaps against 30): lost.
	ss3 := Streams{}
	e, _ := ss3.Add(t0, 100)
	emit(e, t0, 50, ms(50))
	if sl := ss3.Slack(t0.Add(ms(2450)), 2, 0.03, 0, 0.007, Stretch{}); sl.Lost != 1 {
		t.Errorf("behind its TPOT: %+v, want it lost", sl)
	}
	gone()
	if sl := ss.Slack(now, 2, 0.03, 0, 0.007, Stretch{}); sl.Decoding != 2 || sl.Lost != 1 {
		t.Errorf("after a is gone: %+v, want b and c", sl)
	}
}
