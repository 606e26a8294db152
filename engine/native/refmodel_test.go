package native

import (
	"fmt"
	"math"
	"testing"

	"github.com/tandem-serve/tandem/engine/quant"
	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/internal/ggufwrite"
)

// testShape is a small model of a supported architecture, with random weights, for
// checking the engine against a plain reference forward pass.
type testShape struct {
	arch                                  string
	d, layers, heads, kvHeads, ffn, vocab int
	tied, ropeFreqs                       bool
	theta                                 float64
}

// testWeights holds every tensor as f32, matrices row-major as ggml stores them
// (row j is output j's inputs).
type testWeights struct {
	s       testShape
	tensors map[string][]float32
	dims    map[string][]uint64
	order   []string
}

func (s testShape) hd() int { return s.d / s.heads }

func randomTestWeights(s testShape, seed uint64) *testWeights {
	w := &testWeights{s: s, tensors: map[string][]float32{}, dims: map[string][]uint64{}}
	rng := seed
	add := func(name string, std float64, mean float32, dims ...int) {
		n := 1
		ud := make([]uint64, len(dims))
		for i, d := range dims {
			n *= d
			ud[i] = uint64(d)
		}
		v := make([]float32, n)
		for i := range v {
			rng = splitmix(rng)
			v[i] = mean + float32((float64(rng>>11)/(1<<53)*2-1)*std*math.Sqrt(3))
		}
		w.tensors[name], w.dims[name] = v, ud
		w.order = append(w.order, name)
	}
	d, hd := s.d, s.hd()
	add("token_embd.weight", 1, 0, d, s.vocab)
	for l := range s.layers {
		b := fmt.Sprintf("blk.%d.", l)
		add(b+"attn_norm.weight", 0.1, 1, d)
		add(b+"attn_q.weight", 1/math.Sqrt(float64(d)), 0, d, s.heads*hd)
		add(b+"attn_k.weight", 1/math.Sqrt(float64(d)), 0, d, s.kvHeads*hd)
		add(b+"attn_v.weight", 1/math.Sqrt(float64(d)), 0, d, s.kvHeads*hd)
		if s.arch == "qwen2" {
			add(b+"attn_q.bias", 0.5, 0, s.heads*hd)
			add(b+"attn_k.bias", 0.5, 0, s.kvHeads*hd)
			add(b+"attn_v.bias", 0.5, 0, s.kvHeads*hd)
		}
		add(b+"attn_output.weight", 1/math.Sqrt(float64(d)), 0, s.heads*hd, d)
		add(b+"ffn_norm.weight", 0.1, 1, d)
		add(b+"ffn_gate.weight", 1/math.Sqrt(float64(d)), 0, d, s.ffn)
		add(b+"ffn_up.weight", 1/math.Sqrt(float64(d)), 0, d, s.ffn)
		add(b+"ffn_down.weight", 1/math.Sqrt(float64(s.ffn)), 0, s.ffn, d)
	}
	add("output_norm.weight", 0.1, 1, d)
	if !s.tied {
		add("output.weight", 2/math.Sqrt(float64(d)), 0, d, s.vocab)
	}
	if s.ropeFreqs {
		add("rope_freqs.weight", 1, 3, hd/2) // divisors in [1.3, 4.7]
	}
	return w
}

// isMatrix: the tensors a model file may quantize.
func (w *testWeights) isMatrix(name string) bool { return len(w.dims[name]) == 2 }

// as quantizes every matrix to typ and back, giving the weights a model file of
// that type really holds, and the file's bytes.
func (w *testWeights) as(t testing.TB, typ gguf.Type) (*testWeights, []byte) {
	t.Helper()
	out := &testWeights{s: w.s, tensors: map[string][]float32{}, dims: w.dims, order: w.order}
	f := &ggufwrite.File{}
	s := w.s
	f.Set("general.architecture", s.arch).Set("general.name", "test-"+s.arch+"-"+typ.String())
	f.Set(s.arch+".embedding_length", uint32(s.d)).Set(s.arch+".block_count", uint32(s.layers)).
		Set(s.arch+".attention.head_count", uint32(s.heads)).Set(s.arch+".attention.head_count_kv", uint32(s.kvHeads)).
		Set(s.arch+".feed_forward_length", uint32(s.ffn)).Set(s.arch+".context_length", uint32(256)).
		Set(s.arch+".rope.freq_base", float32(s.theta)).Set(s.arch+".attention.layer_norm_rms_epsilon", float32(1e-6))
	for _, name := range w.order {
		v := w.tensors[name]
		tt := gguf.TypeF32
		if w.isMatrix(name) {
			tt = typ
		}
		b, err := quant.Quantize(tt, v)
		if err != nil {
			t.Fatalf("%s as %s: %v", name, tt, err)
		}
		back := make([]float32, len(v))
		if err := quant.Dequantize(tt, b, back); err != nil {
			t.Fatal(err)
		}
		out.tensors[name] = back
		f.Tensor(name, tt, w.dims[name], b)
	}
	b, err := f.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return out, b
}

// reference runs the model plainly in float64, one position at a time, and returns
// every position's logits.
func (w *testWeights) reference(tokens []uint32) [][]float64 {
	s := w.s
	d, hd := s.d, s.hd()
	T := w.tensors
	matvec := func(name string, x []float64, n int) []float64 {
		m := T[name]
		k := len(x)
		out := make([]float64, n)
		for j := range n {
			var acc float64
			for i, xv := range x {
				acc += float64(m[j*k+i]) * xv
			}
			out[j] = acc
		}
		return out
	}
	rms := func(x []float64, g string) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss/float64(len(x))+1e-6)
		out := make([]float64, len(x))
		for i, v := range x {
			out[i] = v * inv * float64(T[g][i])
		}
		return out
	}
	rope := func(x []float64, pos int) {
		half := hd / 2
		for i := range half {
			theta := float64(pos) * math.Pow(s.theta, -2*float64(i)/float64(hd))
			if s.ropeFreqs {
				theta /= float64(T["rope_freqs.weight"][i])
			}
			c, sn := math.Cos(theta), math.Sin(theta)
			a, b := 2*i, 2*i+1 // llama: adjacent pairs
			if s.arch == "qwen2" {
				a, b = i, i+half // NeoX: halves
			}
			x[a], x[b] = x[a]*c-x[b]*sn, x[a]*sn+x[b]*c
		}
	}
	keys := make([][][]float64, s.layers) // [layer][pos] kvHeads*hd
	vals := make([][][]float64, s.layers)
	var logits [][]float64
	for pos, tok := range tokens {
		x := make([]float64, d)
		for i := range d {
			x[i] = float64(T["token_embd.weight"][int(tok)*d+i])
		}
		for l := range s.layers {
			b := fmt.Sprintf("blk.%d.", l)
			h := rms(x, b+"attn_norm.weight")
			q := matvec(b+"attn_q.weight", h, s.heads*hd)
			k := matvec(b+"attn_k.weight", h, s.kvHeads*hd)
			v := matvec(b+"attn_v.weight", h, s.kvHeads*hd)
			if s.arch == "qwen2" {
				for i := range q {
					q[i] += float64(T[b+"attn_q.bias"][i])
				}
				for i := range k {
					k[i] += float64(T[b+"attn_k.bias"][i])
					v[i] += float64(T[b+"attn_v.bias"][i])
				}
			}
			for hh := range s.heads {
				rope(q[hh*hd:(hh+1)*hd], pos)
			}
			for kh := range s.kvHeads {
				rope(k[kh*hd:(kh+1)*hd], pos)
			}
			keys[l] = append(keys[l], k)
			vals[l] = append(vals[l], v)
			att := make([]float64, s.heads*hd)
			for hh := range s.heads {
				kh := hh / (s.heads / s.kvHeads)
				scores := make([]float64, pos+1)
				mx := math.Inf(-1)
				for p := range pos + 1 {
					var dot float64
					for i := range hd {
						dot += q[hh*hd+i] * keys[l][p][kh*hd+i]
					}
					scores[p] = dot / math.Sqrt(float64(hd))
					mx = max(mx, scores[p])
				}
				var sum float64
				for p := range scores {
					scores[p] = math.Exp(scores[p] - mx)
					sum += scores[p]
				}
				for p := range scores {
					for i := range hd {
						att[hh*hd+i] += scores[p] / sum * vals[l][p][kh*hd+i]
					}
				}
			}
			o := matvec(b+"attn_output.weight", att, d)
			for i := range x {
				x[i] += o[i]
			}
			h = rms(x, b+"ffn_norm.weight")
			g := matvec(b+"ffn_gate.weight", h, s.ffn)
			u := matvec(b+"ffn_up.weight", h, s.ffn)
			for i := range g {
				g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
			}
			down := matvec(b+"ffn_down.weight", g, d)
			for i := range x {
				x[i] += down[i]
			}
		}
		h := rms(x, "output_norm.weight")
		out := "output.weight"
		if s.tied {
			out = "token_embd.weight"
		}
		logits = append(logits, matvec(out, h, s.vocab))
	}
	return logits
}
