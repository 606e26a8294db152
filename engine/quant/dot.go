package quant

import "math"

// The float arithmetic of every product, fixed so that each output element is the
// same bits whichever kernel computes it.
//
// A weight row and an activation row meet block by block. Each block's integer dot
// product is split into 8 lanes, lane l summing the products of values 4l..4l+3 of
// each 32-value run (the grouping of VPDPBUSD and of VPMADDUBSW+VPMADDWD); integers
// are exact, so any instruction sequence gives the same lane values. Each lane keeps
// its own float32 accumulator, starting at +0, and folds in one block after another
// with a fused multiply-add (one rounding, VFMADD231PS):
//
//	acc[l] = fma(float32(lane[l]), s, acc[l])
//
// where s is the block's weight scale times its activation scale, rounded to float32.
// Formats with a min or offset add a second fma per block (see the kernels). At the
// end the lanes are summed in one fixed tree, reduce8, and the sum is added to the
// output: out += ((a0+a1)+(a2+a3)) + ((a4+a5)+(a6+a7)), the order VHADDPS gives.

// fma32 is a*b+c rounded once to float32, as VFMADD231PS computes it. Go has no
// float32 FMA, and rounding a float64 FMA to float32 can round twice the wrong way,
// so: the product is exact in float64, the sum is rounded to odd (the inexact last bit
// forced to 1, which keeps it off every float32 halfway point), and then rounded to
// float32, which gives the correctly rounded result (53 >= 24+2 bits).
func fma32(a, b, c float32) float32 {
	p := float64(float64(a) * float64(b)) // exact: two 24-bit significands
	z := float64(c)
	s := p + z
	// TwoSum: e is exactly (p+z)-s.
	bv := s - p
	e := (p - (s - bv)) + (z - bv)
	if (e > 0 || e < 0) && math.Float64bits(s)&1 == 0 {
		s = math.Nextafter(s, math.Copysign(math.Inf(1), e))
	}
	return float32(s)
}

// reduce8 sums the 8 lane accumulators in the kernels' order.
func reduce8(a *[8]float32) float32 {
	return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))
}
