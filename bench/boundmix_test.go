package bench

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// A mix is priced as its classes in their shares: the by-hand requests of
// TestDemandByHand, three of the first to one of the second, at one a second.
func TestMixDemandByHand(t *testing.T) {
	classes := []Class{{Name: "long", Weight: 0.75, ISL: 100, OSL: 11}, {Name: "short", Weight: 0.25, ISL: 50, OSL: 1}}
	d, err := MixDemand(classes, boundDevice(1, 100, CacheNone))
	if err != nil {
		t.Fatal(err)
	}
	// 0.75 x (20 + 26.5) + 0.25 x 10 ms a request.
	if per := d.TotalMS() / float64(d.Requests); !near(per, 37.375) {
		t.Errorf("%g ms a request, want 37.375", per)
	}
	if !near(d.Rate(1), 1) || d.Mix != "0.75:100/11,0.25:50/1" {
		t.Errorf("rate %g at speedup 1, mix %q: want exactly 1 request/s of 0.75:100/11,0.25:50/1", d.Rate(1), d.Mix)
	}
	if x := d.Crossing(1, 1, false); !near(x, 1000/37.375) {
		t.Errorf("one device full at %g requests/s, want %g", x, 1000/37.375)
	}
	// 10 s of arrivals done by 12 s: 12/10 of a device's rate.
	if x := d.MixWindowRate(1, 10000, 2000); !near(x, 1.2*1000/37.375) {
		t.Errorf("window rate %g, want %g", x, 1.2*1000/37.375)
	}
	var out bytes.Buffer
	if err := WriteBound(&out, d, boundDevice(1, 100, CacheNone), []float64{10, 20}, BoundOutput{TTFTMS: 2000, WindowMS: 10000, Markdown: true}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"mix 0.75:100/11,0.25:50/1: 37.38 ms of device time a request", "| requests/s | prefill |",
		"| 20.00 | 0.35 | 0.40 | 0.75 | 0.75 |", "utilisation 1 of 1 devices at 26.8 requests/s", "up to 32.1 requests/s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "speedup") {
		t.Errorf("a mix's table speaks of speedups:\n%s", out.String())
	}
	if _, err := MixDemand(classes, boundDevice(1, 100, CacheUnbounded)); err == nil {
		t.Error("a mix credited by a prefix cache: no error")
	}
	if _, err := MixDemand([]Class{{Name: "none", Weight: 0, ISL: 1, OSL: 1}}, boundDevice(1, 100, CacheNone)); err == nil {
		t.Error("a class of weight 0: no error")
	}
}

// Shares split by largest remainder and sum to n.
func TestShares(t *testing.T) {
	classes := []Class{{Weight: 0.5}, {Weight: 0.3}, {Weight: 0.2}}
	for n, want := range map[int][]int{7: {4, 2, 1}, 10: {5, 3, 2}, 1: {1, 0, 0}} {
		if got := shares(classes, n); !slices.Equal(got, want) {
			t.Errorf("shares of %d: %v, want %v", n, got, want)
		}
	}
}
