package native

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/tandem-serve/tandem/internal/parallel"
	"github.com/tandem-serve/tandem/internal/randmodel"
	"github.com/zeebo/xxh3"
)

// packed is a K x N matrix (input width K, output width N) stored as panels of 16
// columns, each panel K rows of 16 contiguous floats: element (k, n) lives at
// (n/16)*K*16 + k*16 + n%16. N is padded to a multiple of 16 with zeros. This is the
// layout the micro-kernels stream, and it makes a row of the tied embedding a strided
// gather, so the embedding is stored once.
type packed struct {
	K, N   int
	panels int
	data   []float32
}

func newPacked(k, n int) *packed {
	panels := (n + panelWidth - 1) / panelWidth
	return &packed{K: k, N: n, panels: panels, data: make([]float32, panels*k*panelWidth)}
}

func (p *packed) at(k, n int) float32 {
	return p.data[(n/panelWidth)*p.K*panelWidth+k*panelWidth+n%panelWidth]
}

func (p *packed) panel(i int) []float32 {
	return p.data[i*p.K*panelWidth : (i+1)*p.K*panelWidth]
}

type layerWeights struct {
	attnNorm     []float32 // nil: none (OLMo 2)
	wqkv         linear    // d -> (heads + 2 kv heads) x head dim: Q, then K, then V
	qkvBias      []float32 // added to Q, K and V (Qwen2); nil for none
	qNorm, kNorm []float32 // RMS norm weights of Q and K before rope (archSpec.qkNorm); nil: none
	wo           linear    // heads x head dim -> d
	attnPostNorm []float32 // on the attention's output before the residual add; nil: none
	mlpNorm      []float32
	wgu          linear // d -> 2 x ffn: gate, then up
	wdown        linear // ffn -> d
	mlpPostNorm  []float32
}

type weights struct {
	embed     rowSource // token -> d
	output    linear    // d -> vocab
	layers    []layerWeights
	finalNorm []float32
	// ropeFreqs divide each rotated pair's frequency (Llama 3's rope scaling); nil: none.
	ropeFreqs []float32
	// fingerprint hashes every weight, so KV from different weights is refused.
	fingerprint string
}

// newWeights generates a model's weights from seed. Each 16-column panel has its own
// random stream, so generation runs in parallel and the result does not depend on
// how it was split.
func newWeights(mc ModelConfig, seed uint64) *weights {
	d := mc.DModel
	w := &weights{finalNorm: ones(d)}
	embed := newPacked(d, VocabSize)
	w.output, w.embed = embed, columnsOf{embed}
	// Logits get a standard deviation near 2.5: sharp enough to mean something, flat
	// enough that sampling is not greedy in disguise. With a tied embedding the
	// residual stream starts as the input token's own output row, so greedy decoding
	// from random weights repeats its input forever unless the attention and MLP
	// branches outweigh it: their output projections get branchGain.
	const branchGain = 8
	jobs := []func(){func() { fill(embed, seed, 0, 2.5/math.Sqrt(float64(d))) }}
	qkvN := (mc.Heads + 2*mc.KVHeads) * mc.HeadDim
	var all []*packed // in fingerprint order
	all = append(all, embed)
	for l := range mc.Layers {
		wqkv, wo := newPacked(d, qkvN), newPacked(mc.Heads*mc.HeadDim, d)
		wgu, wdown := newPacked(d, 2*mc.FFN), newPacked(mc.FFN, d)
		lw := layerWeights{attnNorm: ones(d), wqkv: wqkv, wo: wo, mlpNorm: ones(d), wgu: wgu, wdown: wdown}
		id := uint64(l+1) << 8
		jobs = append(jobs,
			func() { fill(wqkv, seed, id+1, 1/math.Sqrt(float64(d))) },
			func() { fill(wo, seed, id+2, branchGain/math.Sqrt(float64(mc.Heads*mc.HeadDim))) },
			func() { fill(wgu, seed, id+3, 1/math.Sqrt(float64(d))) },
			func() { fill(wdown, seed, id+4, branchGain/math.Sqrt(float64(mc.FFN))) },
		)
		w.layers = append(w.layers, lw)
		all = append(all, wqkv, wo, wgu, wdown)
	}
	for _, j := range jobs {
		j()
	}
	w.fingerprint = fingerprint(mc, w, all)
	return w
}

func ones(n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

// fill draws every real (unpadded) element uniformly with standard deviation std.
func fill(p *packed, seed, tensor uint64, std float64) {
	scale := float32(std * math.Sqrt(3) * 2 / (1 << 24))
	parallel.For(p.panels, p.K*panelWidth, parallel.MinWork, func(lo, hi int) {
		for pi := lo; pi < hi; pi++ {
			rng := randmodel.SplitMix(seed ^ randmodel.SplitMix(tensor<<32^uint64(pi)))
			cols := min(panelWidth, p.N-pi*panelWidth)
			pan := p.panel(pi)
			for k := range p.K {
				for j := range cols {
					rng = randmodel.SplitMix(rng)
					// 24 random bits centred on zero.
					pan[k*panelWidth+j] = float32(int32(rng>>40)-1<<23) * scale
				}
			}
		}
	})
}

func fingerprint(mc ModelConfig, w *weights, mats []*packed) string {
	h := xxh3.New()
	var hdr [8]byte
	for _, v := range []int{mc.Layers, mc.DModel, mc.Heads, mc.KVHeads, mc.HeadDim, mc.FFN, VocabSize} {
		binary.LittleEndian.PutUint64(hdr[:], uint64(v))
		h.Write(hdr[:])
	}
	write := func(s []float32) {
		h.Write(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 4*len(s)))
	}
	// The order (embedding, then per layer its norm, QKV, output, norm, gate-up, down)
	// is that of every fingerprint published so far.
	write(mats[0].data)
	for l, lw := range w.layers {
		ms := mats[1+4*l:]
		write(lw.attnNorm)
		write(ms[0].data)
		write(ms[1].data)
		write(lw.mlpNorm)
		write(ms[2].data)
		write(ms[3].data)
	}
	write(w.finalNorm)
	return fmt.Sprintf("native-%s-%016x", mc.Name, h.Sum64())
}
