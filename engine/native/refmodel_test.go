package native

import (
	"fmt"
	"math"

	"github.com/tandem-serve/tandem/internal/testutil/testmodel"
)

// refFamily is what the reference knows of each architecture, written from each
// family's published description (the Hugging Face transformers modelling code and
// model cards), not from the engine's archSpec, so the two are independent.
type refFamily struct {
	adjacent     bool // Llama's GGUF permutation: rope on pairs (2i, 2i+1)
	bias         bool // Qwen2's Q, K and V biases
	fused        bool // Phi-3's qkv_proj and gate_up_proj
	qkHead       bool // Qwen3's and Gemma 3's q_norm, k_norm over each head
	qkWhole      bool // OLMo 2's q_norm, k_norm over all heads
	noPreNorm    bool // OLMo 2: norms after attention and the MLP only
	postNorm     bool // Gemma and OLMo 2: post_attention_layernorm, post_feedforward_layernorm
	gelu         bool // Gemma's hidden_activation gelu_pytorch_tanh
	gemmaScale   bool // Gemma's embedding normalizer sqrt(hidden_size)
	slidingEvery int  // Gemma 2: layer i slides when i%2 == 0; Gemma 3: when (i+1)%6 != 0; 1: every layer (Phi-3)
}

var refFamilies = map[string]refFamily{
	"llama":   {adjacent: true},
	"granite": {adjacent: true},
	"qwen2":   {bias: true},
	"qwen3":   {qkHead: true},
	"phi3":    {fused: true, slidingEvery: 1},
	"gemma2":  {postNorm: true, gelu: true, gemmaScale: true, slidingEvery: 2},
	"gemma3":  {postNorm: true, gelu: true, gemmaScale: true, qkHead: true, slidingEvery: 6},
	"olmo2":   {noPreNorm: true, postNorm: true, qkWhole: true},
}

// meta is a float metadata value of w, or def.
func meta(w *testmodel.Weights, key string, def float64) float64 {
	for _, kv := range w.Meta {
		if kv.Key == w.S.Arch+"."+key {
			switch v := kv.Val.(type) {
			case float32:
				return float64(v)
			case uint32:
				return float64(v)
			}
		}
	}
	return def
}

// reference runs the model plainly in float64, one position at a time, and returns
// every position's logits.
func reference(w *testmodel.Weights, tokens []uint32) [][]float64 {
	s := w.S
	fam := refFamilies[s.Arch]
	d, hd := s.D, s.HeadDim()
	qN, kvN := s.Heads*hd, s.KVHeads*hd
	T := w.Tensors
	matvec := func(name string, x []float64, n, row0 int) []float64 {
		m := T[name]
		k := len(x)
		out := make([]float64, n)
		for j := range n {
			var acc float64
			for i, xv := range x {
				acc += float64(m[(row0+j)*k+i]) * xv
			}
			out[j] = acc
		}
		return out
	}
	rms := func(x []float64, g []float32) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss/float64(len(x))+1e-6)
		out := make([]float64, len(x))
		for i, v := range x {
			out[i] = v * inv * float64(g[i])
		}
		return out
	}
	window := int(meta(w, "attention.sliding_window", 0))
	sliding := func(l int) bool {
		switch fam.slidingEvery {
		case 1:
			return window > 0
		case 2:
			return l%2 == 0
		case 6:
			return (l+1)%6 != 0
		}
		return false
	}
	ropeScale := meta(w, "rope.scaling.factor", 1)
	rope := func(x []float64, pos, l int) {
		half := hd / 2
		theta, p := s.Theta, float64(pos)/ropeScale
		if s.Arch == "gemma3" && sliding(l) { // rope_local_base_freq, unscaled
			theta, p = 10000, float64(pos)
		}
		for i := range half {
			angle := p * math.Pow(theta, -2*float64(i)/float64(hd))
			if s.RopeFreqs {
				angle /= float64(T["rope_freqs.weight"][i])
			}
			c, sn := math.Cos(angle), math.Sin(angle)
			a, b := i, i+half // rotate_half
			if fam.adjacent {
				a, b = 2*i, 2*i+1
			}
			x[a], x[b] = x[a]*c-x[b]*sn, x[a]*sn+x[b]*c
		}
	}
	scoreScale := 1 / math.Sqrt(float64(hd)) // Gemma's query_pre_attn_scalar is the head dim here
	if s.Arch == "granite" {
		scoreScale = meta(w, "attention.scale", 0)
	}
	attnCap := meta(w, "attn_logit_softcapping", 0)
	resScale := meta(w, "residual_scale", 1)
	keys := make([][][]float64, s.Layers) // [layer][pos] kvHeads*hd
	vals := make([][][]float64, s.Layers)
	var logits [][]float64
	for pos, tok := range tokens {
		x := make([]float64, d)
		for i := range d {
			x[i] = float64(T["token_embd.weight"][int(tok)*d+i])
			if fam.gemmaScale {
				x[i] *= math.Sqrt(float64(d))
			}
			x[i] *= meta(w, "embedding_scale", 1)
		}
		for l := range s.Layers {
			b := fmt.Sprintf("blk.%d.", l)
			h := x
			if !fam.noPreNorm {
				h = rms(x, T[b+"attn_norm.weight"])
			}
			var q, k, v []float64
			if fam.fused {
				q = matvec(b+"attn_qkv.weight", h, qN, 0)
				k = matvec(b+"attn_qkv.weight", h, kvN, qN)
				v = matvec(b+"attn_qkv.weight", h, kvN, qN+kvN)
			} else {
				q = matvec(b+"attn_q.weight", h, qN, 0)
				k = matvec(b+"attn_k.weight", h, kvN, 0)
				v = matvec(b+"attn_v.weight", h, kvN, 0)
			}
			if fam.bias {
				for i := range q {
					q[i] += float64(T[b+"attn_q.bias"][i])
				}
				for i := range k {
					k[i] += float64(T[b+"attn_k.bias"][i])
					v[i] += float64(T[b+"attn_v.bias"][i])
				}
			}
			if fam.qkWhole {
				q, k = rms(q, T[b+"attn_q_norm.weight"]), rms(k, T[b+"attn_k_norm.weight"])
			}
			for hh := range s.Heads {
				if fam.qkHead {
					copy(q[hh*hd:], rms(q[hh*hd:(hh+1)*hd], T[b+"attn_q_norm.weight"]))
				}
				rope(q[hh*hd:(hh+1)*hd], pos, l)
			}
			for kh := range s.KVHeads {
				if fam.qkHead {
					copy(k[kh*hd:], rms(k[kh*hd:(kh+1)*hd], T[b+"attn_k_norm.weight"]))
				}
				rope(k[kh*hd:(kh+1)*hd], pos, l)
			}
			keys[l] = append(keys[l], k)
			vals[l] = append(vals[l], v)
			first := 0
			if sliding(l) {
				first = max(0, pos-window+1)
			}
			att := make([]float64, qN)
			for hh := range s.Heads {
				kh := hh / (s.Heads / s.KVHeads)
				scores := make([]float64, pos+1)
				mx := math.Inf(-1)
				for p := first; p <= pos; p++ {
					var dot float64
					for i := range hd {
						dot += q[hh*hd+i] * keys[l][p][kh*hd+i]
					}
					scores[p] = dot * scoreScale
					if attnCap != 0 {
						scores[p] = attnCap * math.Tanh(scores[p]/attnCap)
					}
					mx = max(mx, scores[p])
				}
				var sum float64
				for p := first; p <= pos; p++ {
					scores[p] = math.Exp(scores[p] - mx)
					sum += scores[p]
				}
				for p := first; p <= pos; p++ {
					for i := range hd {
						att[hh*hd+i] += scores[p] / sum * vals[l][p][kh*hd+i]
					}
				}
			}
			o := matvec(b+"attn_output.weight", att, d, 0)
			if fam.postNorm {
				o = rms(o, T[b+"post_attention_norm.weight"])
			}
			for i := range x {
				x[i] += resScale * o[i]
			}
			h = x
			if !fam.noPreNorm {
				h = rms(x, T[b+"ffn_norm.weight"])
			}
			var g, u []float64
			if fam.fused {
				g = matvec(b+"ffn_up.weight", h, s.FFN, 0)
				u = matvec(b+"ffn_up.weight", h, s.FFN, s.FFN)
			} else {
				g = matvec(b+"ffn_gate.weight", h, s.FFN, 0)
				u = matvec(b+"ffn_up.weight", h, s.FFN, 0)
			}
			for i, gv := range g {
				if fam.gelu {
					g[i] = 0.5 * gv * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(gv+0.044715*gv*gv*gv))) * u[i]
				} else {
					g[i] = gv / (1 + math.Exp(-gv)) * u[i]
				}
			}
			down := matvec(b+"ffn_down.weight", g, d, 0)
			if fam.postNorm {
				down = rms(down, T[b+"post_ffw_norm.weight"])
			}
			for i := range x {
				x[i] += resScale * down[i]
			}
		}
		h := rms(x, T["output_norm.weight"])
		out := "output.weight"
		if s.Tied {
			out = "token_embd.weight"
		}
		lg := matvec(out, h, s.Vocab, 0)
		finalCap := meta(w, "final_logit_softcapping", 0)
		for i := range lg {
			lg[i] /= meta(w, "logit_scale", 1)
			if finalCap != 0 {
				lg[i] = finalCap * math.Tanh(lg[i]/finalCap)
			}
		}
		logits = append(logits, lg)
	}
	return logits
}
