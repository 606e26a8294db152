package native

import (
	"fmt"
	"math"

	"github.com/tandem-serve/tandem/internal/testmodel"
)

// reference runs the model plainly in float64, one position at a time, and returns
// every position's logits.
func reference(w *testmodel.Weights, tokens []uint32) [][]float64 {
	s := w.S
	d, hd := s.D, s.HeadDim()
	T := w.Tensors
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
			theta := float64(pos) * math.Pow(s.Theta, -2*float64(i)/float64(hd))
			if s.RopeFreqs {
				theta /= float64(T["rope_freqs.weight"][i])
			}
			c, sn := math.Cos(theta), math.Sin(theta)
			a, b := 2*i, 2*i+1 // llama: adjacent pairs
			if s.Arch == "qwen2" {
				a, b = i, i+half // NeoX: halves
			}
			x[a], x[b] = x[a]*c-x[b]*sn, x[a]*sn+x[b]*c
		}
	}
	keys := make([][][]float64, s.Layers) // [layer][pos] kvHeads*hd
	vals := make([][][]float64, s.Layers)
	var logits [][]float64
	for pos, tok := range tokens {
		x := make([]float64, d)
		for i := range d {
			x[i] = float64(T["token_embd.weight"][int(tok)*d+i])
		}
		for l := range s.Layers {
			b := fmt.Sprintf("blk.%d.", l)
			h := rms(x, b+"attn_norm.weight")
			q := matvec(b+"attn_q.weight", h, s.Heads*hd)
			k := matvec(b+"attn_k.weight", h, s.KVHeads*hd)
			v := matvec(b+"attn_v.weight", h, s.KVHeads*hd)
			if s.Arch == "qwen2" {
				for i := range q {
					q[i] += float64(T[b+"attn_q.bias"][i])
				}
				for i := range k {
					k[i] += float64(T[b+"attn_k.bias"][i])
					v[i] += float64(T[b+"attn_v.bias"][i])
				}
			}
			for hh := range s.Heads {
				rope(q[hh*hd:(hh+1)*hd], pos)
			}
			for kh := range s.KVHeads {
				rope(k[kh*hd:(kh+1)*hd], pos)
			}
			keys[l] = append(keys[l], k)
			vals[l] = append(vals[l], v)
			att := make([]float64, s.Heads*hd)
			for hh := range s.Heads {
				kh := hh / (s.Heads / s.KVHeads)
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
			g := matvec(b+"ffn_gate.weight", h, s.FFN)
			u := matvec(b+"ffn_up.weight", h, s.FFN)
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
		if s.Tied {
			out = "token_embd.weight"
		}
		logits = append(logits, matvec(out, h, s.Vocab))
	}
	return logits
}
