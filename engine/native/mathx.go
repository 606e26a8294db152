package native

import "math"

// rmsNorm writes x / rms(x) * g to dst.
func rmsNorm(dst, x, g []float32, eps float32) {
	var ss float32
	for _, v := range x {
		ss += v * v
	}
	inv := float32(1 / math.Sqrt(float64(ss/float32(len(x))+eps)))
	for i, v := range x {
		dst[i] = v * inv * g[i]
	}
}

// swiglu writes silu(gate) * up to dst.
func swiglu(dst, gate, up []float32) {
	expSub(dst, gate, 0, -1)
	for i, g := range gate {
		dst[i] = g / (1 + dst[i]) * up[i]
	}
}

// maxf is the largest of x (not empty), four lanes at a time: slices.Max's
// NaN-propagating max took half of a temperature draw over a 49k vocabulary. A
// maximum is exact in any order; only NaN logits would come out differently.
func maxf(x []float32) float32 {
	m0, m1, m2, m3 := x[0], x[0], x[0], x[0]
	i := 0
	for ; i+4 <= len(x); i += 4 {
		if v := x[i]; v > m0 {
			m0 = v
		}
		if v := x[i+1]; v > m1 {
			m1 = v
		}
		if v := x[i+2]; v > m2 {
			m2 = v
		}
		if v := x[i+3]; v > m3 {
			m3 = v
		}
	}
	for ; i < len(x); i++ {
		if x[i] > m0 {
			m0 = x[i]
		}
	}
	if m1 > m0 {
		m0 = m1
	}
	if m3 > m2 {
		m2 = m3
	}
	if m2 > m0 {
		m0 = m2
	}
	return m0
}

// expf is e^x in float32 to about 2 ulp, several times faster than math.Exp; softmax
// over attention scores and the vocabulary spends its time here.
func expf(x float32) float32 {
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375
		ln2lo = -2.12194440e-4
	)
	if x < -87.3 {
		return 0
	}
	if x > 88 { // 2^n would overflow before the polynomial brings it back
		return float32(math.Exp(float64(x)))
	}
	n := float32(math.Floor(float64(x*log2e + 0.5)))
	r := x - n*ln2hi - n*ln2lo
	// Minimax polynomial for e^r on [-ln2/2, ln2/2] (Cephes expf).
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	p = p*r*r + r + 1
	return p * math.Float32frombits(uint32(int32(n)+127)<<23)
}

// ropeTable holds cos and sin of the rotation angle for every position and rotated
// pair: pos / scale * theta^(-2i/dims) / freqs[i]. Which lanes form pair i depends on
// the model family (ropeStyle).
type ropeTable struct {
	half     int
	style    ropeStyle
	cos, sin []float32
	inv      []float64 // per pair: theta^(-2i/dims) / freqs[i]
	scale    float64
}

// maxRopeTable bounds the positions tabulated up front; beyond it (a model with a
// very long context) the angles are computed on first use of a position.
const maxRopeTable = 32768

func newRope(mc ModelConfig, freqs []float32) *ropeTable {
	dims := mc.ropeDims()
	half := dims / 2
	ctx := min(mc.ContextLength, maxRopeTable)
	t := &ropeTable{half: half, style: mc.RopeStyle, cos: make([]float32, ctx*half), sin: make([]float32, ctx*half)}
	scale := mc.RopeScale
	if scale <= 0 {
		scale = 1
	}
	inv := make([]float64, half)
	for i := range inv {
		inv[i] = math.Pow(mc.RopeTheta, -2*float64(i)/float64(dims))
		if freqs != nil {
			inv[i] /= float64(freqs[i])
		}
	}
	for p := range ctx {
		for i := range half {
			a := float64(p) / scale * inv[i]
			t.cos[p*half+i] = float32(math.Cos(a))
			t.sin[p*half+i] = float32(math.Sin(a))
		}
	}
	t.inv, t.scale = inv, scale
	return t
}

// apply rotates one head's vector x to position pos.
func (t *ropeTable) apply(x []float32, pos int) {
	h := t.half
	var c, s []float32
	if (pos+1)*h <= len(t.cos) {
		c, s = t.cos[pos*h:(pos+1)*h], t.sin[pos*h:(pos+1)*h]
	} else {
		c, s = t.angles(pos)
	}
	if t.style == ropeAdjacent {
		for i := range h {
			a, b := x[2*i], x[2*i+1]
			x[2*i] = a*c[i] - b*s[i]
			x[2*i+1] = a*s[i] + b*c[i]
		}
		return
	}
	for i := range h {
		a, b := x[i], x[i+h]
		x[i] = a*c[i] - b*s[i]
		x[i+h] = a*s[i] + b*c[i]
	}
}

// angles computes one position's cos and sin beyond the table, with the table's formula.
func (t *ropeTable) angles(pos int) (c, s []float32) {
	c, s = make([]float32, t.half), make([]float32, t.half)
	for i := range t.half {
		a := float64(pos) / t.scale * t.inv[i]
		c[i], s[i] = float32(math.Cos(a)), float32(math.Sin(a))
	}
	return c, s
}
