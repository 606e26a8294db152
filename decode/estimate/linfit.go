package estimate

import "math"

// fitWindow is how many recent observations a linear fit remembers: enough that
// one odd prefill (a short prompt that shared its step with a long one) moves the
// line little, few enough that a change of load or hardware is learnt within a
// minute of traffic.
const fitWindow = 64

// linearFit is y = a + b·x by least squares over the last fitWindow observations.
// A bounded window rather than recursive least squares with a forgetting factor:
// recomputing 64 points at each decision is a few hundred floating-point
// operations, cannot drift or lose precision the way an updated inverse can, and
// an outlier's weight is exactly 1/64 until it leaves. No library in go.mod does
// this (gonum is not a dependency, and a 2-parameter fit does not justify one).
type linearFit struct {
	x, y [fitWindow]float64
	next int // where the next observation goes
	n    int // observations held, at most fitWindow
	// slope is the last slope fitted from observations of different sizes, kept
	// for when the window holds only one size and cannot tell a from b.
	slope    float64
	hasSlope bool
}

func (f *linearFit) add(x, y float64) {
	if !(x > 0) || !(y >= 0) || math.IsInf(x, 0) || math.IsInf(y, 0) {
		return // NaN, negative or infinite: nothing to learn
	}
	f.x[f.next], f.y[f.next] = x, y
	f.next = (f.next + 1) % fitWindow
	f.n = min(f.n+1, fitWindow)
}

// fit returns the intercept a and slope b, both non-negative (a time cannot
// shrink with more work, nor be negative with none), and whether there was any
// observation. With every x alike the window cannot separate a from b: then the
// last slope fitted from a spread window is kept (or, never having had one, the
// line through the origin, which charges the whole time per unit: an
// overestimate that shrinks once sizes vary).
func (f *linearFit) fit() (a, b float64, ok bool) {
	if f.n == 0 {
		return 0, 0, false
	}
	var mx, my float64
	for i := range f.n {
		mx += f.x[i]
		my += f.y[i]
	}
	mx /= float64(f.n)
	my /= float64(f.n)
	var sxx, sxy float64
	for i := range f.n {
		dx := f.x[i] - mx
		sxx += dx * dx
		sxy += dx * (f.y[i] - my)
	}
	// Spread enough: a standard deviation of x above a tenth of its mean. Below
	// that the slope is mostly noise divided by a small number.
	if f.n >= 2 && sxx/float64(f.n) > 0.01*mx*mx {
		b = sxy / sxx
		a = my - b*mx
		switch {
		case b < 0:
			a, b = my, 0
		case a < 0:
			// Through the origin: least squares with no intercept.
			var sxy0, sxx0 float64
			for i := range f.n {
				sxx0 += f.x[i] * f.x[i]
				sxy0 += f.x[i] * f.y[i]
			}
			a, b = 0, sxy0/sxx0
		}
		f.slope, f.hasSlope = b, true
		return a, b, true
	}
	if f.hasSlope {
		b = f.slope
		a = my - b*mx
		if a >= 0 {
			return a, b, true
		}
	}
	return 0, my / mx, true
}

// count is how many observations the fit holds.
func (f *linearFit) count() int { return f.n }
