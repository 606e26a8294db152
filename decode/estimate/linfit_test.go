package estimate

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// The fit recovers a line's intercept and slope from noisy points, and forgets
// points older than its window.
func TestLinearFitRecoversTheLine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var f linearFit
	// Old points of another line, which the window must have forgotten.
	for range fitWindow {
		f.add(100+rng.Float64()*4000, 1)
	}
	const a, b = 0.0068, 27e-6 // the h100-llama8b profile's step floor and per-token cost, in seconds
	for range fitWindow {
		x := 16 + rng.Float64()*8000
		f.add(x, (a+b*x)*(1+0.1*rng.NormFloat64())) // 10 % noise
	}
	ga, gb, ok := f.fit()
	if !ok || math.Abs(ga-a) > 0.3*a || math.Abs(gb-b) > 0.1*b {
		t.Errorf("fit a=%g b=%g (ok %v), want %g, %g", ga, gb, ok, a, b)
	}
}

func TestLinearFitDegenerate(t *testing.T) {
	var f linearFit
	if _, _, ok := f.fit(); ok {
		t.Error("an empty fit says ok")
	}
	f.add(-1, 2)
	f.add(math.NaN(), 2)
	f.add(10, math.Inf(1))
	if f.count() != 0 {
		t.Errorf("took %d bad points", f.count())
	}
	// One size only, never a spread: the line through the origin.
	for range 5 {
		f.add(100, 0.5)
	}
	if a, b, _ := f.fit(); a != 0 || math.Abs(b-0.005) > 1e-12 {
		t.Errorf("one size: a=%g b=%g, want 0, 0.005", a, b)
	}
	// Spread once, then one size again: the last slope is kept, the intercept
	// moves to fit the size seen.
	for _, x := range []float64{100, 1000, 2000, 4000} {
		f.add(x, 0.01+1e-5*x)
	}
	if _, b, _ := f.fit(); math.Abs(b-1e-5) > 1e-5 {
		t.Fatalf("spread: b=%g", b)
	}
	_, slope, _ := f.fit()
	for range fitWindow {
		f.add(500, 0.03)
	}
	if a, b, _ := f.fit(); b != slope || math.Abs(a-(0.03-slope*500)) > 1e-9 {
		t.Errorf("one size after a spread: a=%g b=%g, want the kept slope %g", a, b, slope)
	}
	// A falling line is no time model: flat at the mean.
	var g linearFit
	for _, x := range []float64{100, 200, 300, 400} {
		g.add(x, 1-x/1000)
	}
	if a, b, _ := g.fit(); b != 0 || math.Abs(a-0.75) > 1e-9 {
		t.Errorf("falling: a=%g b=%g, want 0.75, 0", a, b)
	}
}

// The estimator charges the fixed cost once per step, so a long prompt is not
// charged a short one's floor per token; a queue is its tokens at the fitted
// slope plus a floor per step's worth of them, on both sides.
func TestEstimatorLinePerStep(t *testing.T) {
	e := Estimator{Chunk: 8192}
	const a, b = 0.007, 27e-6
	secs := func(n int) time.Duration {
		return time.Duration((a*float64(Chunks(n, 8192)) + b*float64(n)) * float64(time.Second))
	}
	for i, n := range []int{64, 128, 512, 1024, 2048, 4096, 8192, 16384} {
		// Half of them arrive behind a queue of 3000 tokens, whose time is in
		// what they measure: it must not be learnt as their own.
		q := 3000 * (i % 2)
		e.ObserveLocal(n, q, secs(q+n))
		// A prefill worker reports a queue wait and its prefill apart.
		wait := secs(q+n) - secs(n)
		e.ObserveRemote(n, q, secs(n), wait, 0, 0, secs(q+n))
	}
	est := e.Estimate(2048, 0, 0, 16384, 0, 0)
	if want := a + b*2048; math.Abs(est.LocalPrefill-want) > 0.02*want {
		t.Errorf("local 2048: %gs, want %gs", est.LocalPrefill, want)
	}
	if want := 3*a + b*(16384+2048); math.Abs(est.Remote-want) > 0.02*want {
		t.Errorf("remote 2048 behind 16384: %gs, want %gs", est.Remote, want)
	}
	if want := 2*a + b*16384; math.Abs(est.RemoteQueue-want) > 0.03*want {
		t.Errorf("remote queue of 16384: %gs, want %gs", est.RemoteQueue, want)
	}
	if est = e.Estimate(100, 0, 8100, 0, 0, 0); math.Abs(est.Local-(2*a+b*8200)) > 0.02*(2*a+b*8200) {
		t.Errorf("local 100 behind 8100 (two steps): %gs, want %gs", est.Local, 2*a+b*8200)
	}
	// The queue wait each remote prefill reported is not overhead.
	if oh := e.get(&e.overhead, -1); oh > 1e-6 {
		t.Errorf("overhead %gs counts the queue wait", oh)
	}
	if !est.Warm {
		t.Error("not warm after 8 of each")
	}
}
