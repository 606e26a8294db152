// Package randmodel is what every random-weight model in tandem shares: the
// tensors of a llama-family decoder with the spread of their random values, and
// the random source. internal/testutil/testmodel builds test models from it and
// bench/enginebench the benchmark models; each draws its own values, so their
// files stay what they were.
package randmodel

import (
	"fmt"
	"math"
)

// SplitMix is SplitMix64's finaliser over x+golden: a cheap, well-mixed step, used
// as a stream (x = SplitMix(x)) or a hash.
func SplitMix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Shape is a decoder's hyperparameters, as far as its tensor list depends on them.
type Shape struct {
	Arch                                  string // a GGUF architecture: its family's tensors
	D, Layers, Heads, KVHeads, FFN, Vocab int
	HeadDim                               int  // 0: D/Heads
	Tied                                  bool // no output matrix: the embedding serves
	RopeFreqs                             bool // Llama 3's rope_freqs
}

// Tensor is one tensor of a shape and the spread of its random values.
type Tensor struct {
	Name string
	// Layer is the block the tensor belongs to, -1 outside the blocks.
	Layer int
	// Dims are GGUF's: {K, N} for a matrix of N rows of K values, {N} for a vector.
	Dims      []int
	Mean, Std float64
}

// Tensors lists a shape's tensors in file order. Matrices have a standard
// deviation of 1/sqrt(d_model) (1/sqrt(FFN) for ffn_down), so activations keep
// their scale through the layers; norms are near 1.
func Tensors(s Shape) []Tensor {
	d, hd := s.D, s.D/s.Heads
	if s.HeadDim != 0 {
		hd = s.HeadDim
	}
	qN, kvN := s.Heads*hd, s.KVHeads*hd
	postNorms := s.Arch == "gemma2" || s.Arch == "gemma3" || s.Arch == "olmo2"
	inv := func(k int) float64 { return 1 / math.Sqrt(float64(k)) }
	var ts []Tensor
	add := func(name string, layer int, mean, std float64, dims ...int) {
		ts = append(ts, Tensor{Name: name, Layer: layer, Dims: dims, Mean: mean, Std: std})
	}
	add("token_embd.weight", -1, 0, 1, d, s.Vocab)
	for l := range s.Layers {
		b := fmt.Sprintf("blk.%d.", l)
		if s.Arch != "olmo2" { // OLMo 2 norms only after attention and the MLP
			add(b+"attn_norm.weight", l, 1, 0.1, d)
		}
		if s.Arch == "phi3" { // Phi-3 fuses Q, K and V, and gate and up
			add(b+"attn_qkv.weight", l, 0, inv(d), d, qN+2*kvN)
		} else {
			add(b+"attn_q.weight", l, 0, inv(d), d, qN)
			add(b+"attn_k.weight", l, 0, inv(d), d, kvN)
			add(b+"attn_v.weight", l, 0, inv(d), d, kvN)
		}
		if s.Arch == "qwen2" {
			add(b+"attn_q.bias", l, 0, 0.5, qN)
			add(b+"attn_k.bias", l, 0, 0.5, kvN)
			add(b+"attn_v.bias", l, 0, 0.5, kvN)
		}
		switch s.Arch {
		case "qwen3", "gemma3": // one norm per head
			add(b+"attn_q_norm.weight", l, 1, 0.1, hd)
			add(b+"attn_k_norm.weight", l, 1, 0.1, hd)
		case "olmo2": // over all heads
			add(b+"attn_q_norm.weight", l, 1, 0.1, qN)
			add(b+"attn_k_norm.weight", l, 1, 0.1, kvN)
		}
		add(b+"attn_output.weight", l, 0, inv(qN), qN, d)
		if postNorms {
			add(b+"post_attention_norm.weight", l, 1, 0.1, d)
		}
		if s.Arch != "olmo2" {
			add(b+"ffn_norm.weight", l, 1, 0.1, d)
		}
		if s.Arch == "phi3" {
			add(b+"ffn_up.weight", l, 0, inv(d), d, 2*s.FFN)
		} else {
			add(b+"ffn_gate.weight", l, 0, inv(d), d, s.FFN)
			add(b+"ffn_up.weight", l, 0, inv(d), d, s.FFN)
		}
		add(b+"ffn_down.weight", l, 0, inv(s.FFN), s.FFN, d)
		if postNorms {
			add(b+"post_ffw_norm.weight", l, 1, 0.1, d)
		}
	}
	add("output_norm.weight", -1, 1, 0.1, d)
	if !s.Tied {
		add("output.weight", -1, 0, 2*inv(d), d, s.Vocab)
	}
	if s.RopeFreqs {
		add("rope_freqs.weight", -1, 3, 1, hd/2) // divisors in [1.3, 4.7]
	}
	return ts
}
