package native

import (
	"math"

	"github.com/tandem-serve/tandem/internal/parallel"
)

// layer runs block l over the pass's T tokens, updating the residual stream ws.x.
func (m *model) layer(ws *workspace, l, T int, segs []segment, plan attnPlan) {
	mc := m.mc
	a := &mc.arch
	d, hd := mc.DModel, mc.HeadDim
	qkvLd := m.qkvLd
	lw := &m.w.layers[l]
	x := ws.x[:T*d]
	h := ws.h[:T*d]
	in := x // OLMo 2 has no norm before attention
	if lw.attnNorm != nil {
		normRows(h, x, T, d, lw.attnNorm, mc.NormEps)
		in = h
	}
	qkv := ws.qkv[:T*qkvLd]
	clear(qkv)
	lw.wqkv.mulAdd(T, in, d, qkv, qkvLd)
	scale := a.attnScale
	if scale == 0 {
		scale = float32(1 / math.Sqrt(float64(hd)))
	}
	rope := m.ropes[l]
	qN, kvN := mc.Heads*hd, mc.KVHeads*hd
	for _, s := range segs {
		for i := range s.n {
			t, pos := s.row0+i, s.pos0+i
			row := qkv[t*qkvLd : t*qkvLd+qN+2*kvN]
			for j, b := range lw.qkvBias {
				row[j] += b
			}
			if lw.qNorm != nil {
				m.normQK(row[:qN], row[qN:qN+kvN], lw)
			}
			for hh := range mc.Heads {
				q := row[hh*hd : (hh+1)*hd]
				rope.apply(q, pos)
				for j := range q {
					q[j] *= scale
				}
			}
			for kh := range mc.KVHeads {
				k := row[qN+kh*hd : qN+(kh+1)*hd]
				rope.apply(k, pos)
				v := row[qN+kvN+kh*hd : qN+kvN+(kh+1)*hd]
				m.storeKV(s.blocks[pos/m.blockSize], l, kh, pos%m.blockSize, k, v)
			}
		}
	}
	att := ws.att[:T*qN]
	m.attention(l, qkv, qkvLd, att, plan)
	m.residual(x, h, T, lw.attnPostNorm, func(dst []float32) { lw.wo.mulAdd(T, att, qN, dst, d) })
	in = x
	if lw.mlpNorm != nil {
		normRows(h, x, T, d, lw.mlpNorm, mc.NormEps)
		in = h
	}
	f, guLd := mc.FFN, m.guLd
	gu := ws.gu[:T*guLd]
	clear(gu)
	lw.wgu.mulAdd(T, in, d, gu, guLd)
	act := ws.act[:T*f]
	glu := swiglu
	if a.gelu {
		glu = geglu
	}
	parallel.For(T, 8*f, parallel.MinProduct, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			glu(act[t*f:(t+1)*f], gu[t*guLd:t*guLd+f], gu[t*guLd+f:t*guLd+2*f])
		}
	})
	m.residual(x, h, T, lw.mlpPostNorm, func(dst []float32) { lw.wdown.mulAdd(T, act, f, dst, d) })
}

// residual adds a branch's output, which product writes, to the residual stream x.
// Llama's branch adds straight into x; a post-norm or a residual scale needs the
// output on its own first, in buf.
func (m *model) residual(x, buf []float32, T int, postNorm []float32, product func(dst []float32)) {
	rs := m.mc.arch.resScale
	if postNorm == nil && rs == 0 {
		product(x)
		return
	}
	d := m.mc.DModel
	clear(buf)
	product(buf)
	if postNorm != nil {
		normRows(buf, buf, T, d, postNorm, m.mc.NormEps)
	}
	if rs == 0 {
		rs = 1
	}
	for i, v := range buf {
		x[i] += rs * v
	}
}

// normQK applies a layer's query and key norms to one token's Q and K.
func (m *model) normQK(q, k []float32, lw *layerWeights) {
	eps := m.mc.NormEps
	if len(lw.qNorm) == len(q) { // over all heads at once
		rmsNorm(q, q, lw.qNorm, eps)
		rmsNorm(k, k, lw.kNorm, eps)
		return
	}
	hd := m.mc.HeadDim
	for i := 0; i < len(q); i += hd {
		rmsNorm(q[i:i+hd], q[i:i+hd], lw.qNorm, eps)
	}
	for i := 0; i < len(k); i += hd {
		rmsNorm(k[i:i+hd], k[i:i+hd], lw.kNorm, eps)
	}
}

// geglu writes gelu(gate) * up to dst, with GELU's tanh approximation, which is
// what Gemma was trained with (gelu_pytorch_tanh).
func geglu(dst, gate, up []float32) {
	const c = 0.7978845608028654 // sqrt(2/pi)
	for i, g := range gate {
		x := float64(g)
		dst[i] = float32(0.5*x*(1+math.Tanh(c*(x+0.044715*x*x*x)))) * up[i]
	}
}

// finishLogits applies a family's last step to one row of logits.
func finishLogits(a archSpec, row []float32) {
	if a.logitScale != 0 {
		inv := 1 / a.logitScale
		for i := range row {
			row[i] *= inv
		}
	}
	if c := a.finalCap; c != 0 {
		softcap(row, c)
	}
}

// softcap sets each x to c*tanh(x/c): Gemma 2 bounds attention scores and logits so.
func softcap(xs []float32, c float32) {
	for i, x := range xs {
		xs[i] = c * float32(math.Tanh(float64(x/c)))
	}
}

// layerRopes makes the rope table of every layer, sharing one where they agree.
func layerRopes(mc ModelConfig, freqs []float32) []*ropeTable {
	global := newRope(mc, freqs)
	var local *ropeTable
	out := make([]*ropeTable, mc.Layers)
	for l := range out {
		out[l] = global
		if mc.arch.localTheta != 0 && mc.arch.sliding(l) {
			if local == nil {
				lc := mc
				lc.RopeTheta, lc.RopeScale = mc.arch.localTheta, 1
				local = newRope(lc, nil)
			}
			out[l] = local
		}
	}
	return out
}
