// Package testmodel writes small GGUF models with random weights, of the
// architectures and tensor types the native engine serves, for tests in any
// package: the engine's reference comparisons, the decode path equivalences.
package testmodel

import (
	"math"
	"testing"

	"github.com/tandem-serve/tandem/engine/quant"
	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/internal/randmodel"
)

// Shape is a small model of a supported architecture, with random weights, for
// checking the engine against a plain reference forward pass.
type Shape struct {
	Arch                                  string // a GGUF architecture the engine serves
	D, Layers, Heads, KVHeads, FFN, Vocab int
	KeyLength                             int  // head dimension when it is not D/Heads (Qwen3, Gemma)
	Tied, RopeFreqs                       bool // tied output; Llama 3's rope_freqs
	Theta                                 float64
}

// Weights holds every tensor as f32, matrices row-major as ggml stores them
// (row j is output j's inputs).
type Weights struct {
	S       Shape
	Tensors map[string][]float32
	Dims    map[string][]uint64
	Order   []string
	// Meta is more metadata for the file, written after the shape's, in order: a
	// family's own keys (soft caps, windows, scales), a vocabulary, a chat template.
	Meta []KV
}

// KV is one metadata key and its value, typed as gguf.Writer.Set takes it.
type KV struct {
	Key string
	Val any
}

// HeadDim is the width of each attention head.
func (s Shape) HeadDim() int {
	if s.KeyLength != 0 {
		return s.KeyLength
	}
	return s.D / s.Heads
}

// Random draws every tensor of s from one SplitMix stream of seed, in file order.
func Random(s Shape, seed uint64) *Weights {
	w := &Weights{S: s, Tensors: map[string][]float32{}, Dims: map[string][]uint64{}}
	rng := seed
	for _, t := range randmodel.Tensors(randmodel.Shape{Arch: s.Arch, D: s.D, Layers: s.Layers, Heads: s.Heads,
		KVHeads: s.KVHeads, FFN: s.FFN, Vocab: s.Vocab, HeadDim: s.KeyLength, Tied: s.Tied, RopeFreqs: s.RopeFreqs}) {
		n := 1
		ud := make([]uint64, len(t.Dims))
		for i, d := range t.Dims {
			n *= d
			ud[i] = uint64(d)
		}
		v := make([]float32, n)
		for i := range v {
			rng = randmodel.SplitMix(rng)
			v[i] = float32(t.Mean) + float32((float64(rng>>11)/(1<<53)*2-1)*t.Std*math.Sqrt(3))
		}
		w.Tensors[t.Name], w.Dims[t.Name] = v, ud
		w.Order = append(w.Order, t.Name)
	}
	return w
}

// IsMatrix reports whether name is a matrix, which a model file may quantize.
func (w *Weights) IsMatrix(name string) bool { return len(w.Dims[name]) == 2 }

// As quantizes every matrix to typ and back, giving the weights a model file of
// that type really holds, and the file's bytes.
func (w *Weights) As(t testing.TB, typ gguf.Type) (*Weights, []byte) {
	t.Helper()
	out := &Weights{S: w.S, Tensors: map[string][]float32{}, Dims: w.Dims, Order: w.Order, Meta: w.Meta}
	f := &gguf.Writer{}
	s := w.S
	f.Set("general.architecture", s.Arch).Set("general.name", "test-"+s.Arch+"-"+typ.String())
	f.Set(s.Arch+".embedding_length", uint32(s.D)).Set(s.Arch+".block_count", uint32(s.Layers)).
		Set(s.Arch+".attention.head_count", uint32(s.Heads)).Set(s.Arch+".attention.head_count_kv", uint32(s.KVHeads)).
		Set(s.Arch+".feed_forward_length", uint32(s.FFN)).Set(s.Arch+".context_length", uint32(1024)).
		Set(s.Arch+".rope.freq_base", float32(s.Theta)).Set(s.Arch+".attention.layer_norm_rms_epsilon", float32(1e-6))
	if s.KeyLength != 0 {
		f.Set(s.Arch+".attention.key_length", uint32(s.KeyLength)).Set(s.Arch+".attention.value_length", uint32(s.KeyLength))
	}
	for _, kv := range w.Meta {
		f.Set(kv.Key, kv.Val)
	}
	for _, name := range w.Order {
		v := w.Tensors[name]
		tt := gguf.TypeF32
		if w.IsMatrix(name) {
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
		out.Tensors[name] = back
		f.Tensor(name, tt, w.Dims[name], b)
	}
	b, err := f.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return out, b
}
