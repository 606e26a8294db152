// Package enginebench measures the native engine as llama.cpp's llama-bench measures
// llama.cpp: prompt processing and generation tokens per second per thread count, on
// GGUF files of a real model's shape with random weights, which it also writes
// (`tandem bench make-model`), so that the figures compare cell for cell.
package enginebench

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/tandem-serve/tandem/engine/quant"
	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/internal/randmodel"
	"github.com/tandem-serve/tandem/models"
	"github.com/tandem-serve/tandem/tokenizer"
)

// Shape is a decoder's hyperparameters.
type Shape struct {
	Name                                  string
	Arch                                  string // GGUF architecture; "" is llama
	D, Layers, Heads, KVHeads, FFN, Vocab int
	Context                               int
	Theta                                 float64
	Eps                                   float64 // RMS norm epsilon; 0 is 1e-5
}

// Shapes are the shapes MakeModel knows by name. smollm2-135m is SmolLM2-135M's
// (143 M parameters with its separate output matrix), a model llama.cpp's
// llama-bench can run on the same file; olmo2-1b is OLMo-2-0425-1B's (1.48 B
// parameters), an architecture tandem added that the llama.cpp of the side-by-side
// harness also runs; smoke is a small one (rows of 320 and 256 values, so both the
// K-quants and their fallbacks appear) that tests and smoke runs make in milliseconds.
var Shapes = []Shape{
	{Name: "smollm2-135m", D: 576, Layers: 30, Heads: 9, KVHeads: 3, FFN: 1536, Vocab: 32000, Context: 8192, Theta: 100000},
	{Name: "olmo2-1b", Arch: "olmo2", D: 2048, Layers: 16, Heads: 16, KVHeads: 16, FFN: 8192, Vocab: 100352, Context: 4096, Theta: 500000, Eps: 1e-6},
	{Name: "smoke", D: 320, Layers: 3, Heads: 5, KVHeads: 1, FFN: 512, Vocab: 1000, Context: 1024, Theta: 10000},
}

// ShapeNames lists the shapes' names.
func ShapeNames() []string {
	names := make([]string, len(Shapes))
	for j, s := range Shapes {
		names[j] = s.Name
	}
	return names
}

// LookupShape returns the named shape.
func LookupShape(name string) (Shape, error) {
	i := slices.IndexFunc(Shapes, func(s Shape) bool { return s.Name == name })
	if i < 0 {
		return Shape{}, fmt.Errorf("enginebench: unknown shape %q (known: %s)", name, strings.Join(ShapeNames(), ", "))
	}
	return Shapes[i], nil
}

// FileTypes are the weight formats MakeModel writes, named as llama.cpp's quantize
// names them.
var FileTypes = []string{"f32", "f16", "q8_0", "q4_0", "q4_k_m"}

// fileTypeCodes are llama.cpp's general.file_type numbers (LLAMA_FTYPE_*).
var fileTypeCodes = map[string]uint32{"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7, "q4_k_m": 15}

// tensorType is the type llama.cpp's quantize gives a weight matrix of a file type:
// for Q4_K_M, Q6_K on attn_v and ffn_down in the layers use_more_bits picks and Q4_K
// elsewhere; the output matrix is Q6_K; and for rows whose length is not a multiple
// of 256 (d_model 576), its fallbacks: Q5_0 for Q4_K, Q8_0 for Q6_K.
func tensorType(fileType, name string, layer, layers, k int) (gguf.Type, error) {
	var t gguf.Type
	switch fileType {
	case "f32":
		return gguf.TypeF32, nil
	case "f16":
		return gguf.TypeF16, nil
	case "q8_0":
		return gguf.TypeQ8_0, nil
	case "q4_0":
		t = gguf.TypeQ4_0
	case "q4_k_m":
		t = gguf.TypeQ4_K
		moreBits := layer < layers/8 || layer >= 7*layers/8 || (layer-layers/8)%3 == 2
		if (strings.HasSuffix(name, "attn_v.weight") || strings.HasSuffix(name, "ffn_down.weight")) && moreBits {
			t = gguf.TypeQ6_K
		}
	default:
		return 0, fmt.Errorf("enginebench: unknown file type %q (known: %s)", fileType, strings.Join(FileTypes, ", "))
	}
	if name == "output.weight" {
		t = gguf.TypeQ6_K // llama.cpp's choice for the output of every 4- and 5-bit type
	}
	if k%256 != 0 {
		switch t {
		case gguf.TypeQ4_K:
			return gguf.TypeQ5_0, nil
		case gguf.TypeQ6_K:
			return gguf.TypeQ8_0, nil
		}
	}
	return t, nil
}

// uniform fills n values with mean and standard deviation std from tensor's own
// stream of seed, so each tensor's values do not depend on the others.
func uniform(n int, seed, tensor uint64, mean, std float64) []float32 {
	v := make([]float32, n)
	rng := randmodel.SplitMix(seed ^ randmodel.SplitMix(tensor))
	for i := range v {
		rng = randmodel.SplitMix(rng)
		v[i] = float32(mean + (float64(rng>>11)/(1<<53)*2-1)*std*math.Sqrt(3))
	}
	return v
}

// MakeModel builds a GGUF file of shape s with random weights drawn from seed, its
// matrices in fileType, and the tokenizer of the embedded stories260K padded with
// unused tokens to the shape's vocabulary, so that a worker serves it like any model.
func MakeModel(s Shape, fileType string, seed uint64) ([]byte, error) {
	if s.D%s.Heads != 0 || s.Heads%s.KVHeads != 0 {
		return nil, fmt.Errorf("enginebench: shape %s: %d heads do not divide d_model %d into KV groups of %d",
			s.Name, s.Heads, s.D, s.KVHeads)
	}
	if _, err := tensorType(fileType, "", 0, 1, 256); err != nil {
		return nil, err
	}
	var f gguf.Writer
	arch, eps := s.Arch, s.Eps
	if arch == "" {
		arch = "llama"
	}
	if eps == 0 {
		eps = 1e-5
	}
	f.Set("general.architecture", arch).Set("general.name", fmt.Sprintf("%s-random-%s", s.Name, fileType)).
		Set("general.file_type", fileTypeCodes[fileType])
	f.Set(arch+".embedding_length", uint32(s.D)).Set(arch+".block_count", uint32(s.Layers)).
		Set(arch+".attention.head_count", uint32(s.Heads)).Set(arch+".attention.head_count_kv", uint32(s.KVHeads)).
		Set(arch+".feed_forward_length", uint32(s.FFN)).Set(arch+".context_length", uint32(s.Context)).
		Set(arch+".rope.freq_base", float32(s.Theta)).Set(arch+".attention.layer_norm_rms_epsilon", float32(eps)).
		Set(arch+".rope.dimension_count", uint32(s.D/s.Heads)).Set(arch+".vocab_size", uint32(s.Vocab))
	if err := writeTokenizer(&f, s.Vocab); err != nil {
		return nil, err
	}
	var errs []error
	for i, t := range randmodel.Tensors(randmodel.Shape{Arch: arch, D: s.D, Layers: s.Layers, Heads: s.Heads,
		KVHeads: s.KVHeads, FFN: s.FFN, Vocab: s.Vocab}) {
		n := 1
		for _, d := range t.Dims {
			n *= d
		}
		v := uniform(n, seed, uint64(i+1), t.Mean, t.Std)
		dims := make([]uint64, len(t.Dims))
		for j, d := range t.Dims {
			dims[j] = uint64(d)
		}
		if len(dims) == 1 { // a norm: always F32, as llama.cpp keeps them
			f.F32(t.Name, dims, v)
			continue
		}
		typ, err := tensorType(fileType, t.Name, t.Layer, s.Layers, t.Dims[0])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b, err := quant.Quantize(typ, v)
		if err != nil {
			errs = append(errs, fmt.Errorf("enginebench: %s as %s: %w", t.Name, typ, err))
			continue
		}
		f.Tensor(t.Name, typ, dims, b)
	}
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return f.Bytes()
}

// writeTokenizer adds stories260K's tokenizer, its vocabulary padded to vocab ids
// with unused tokens: random weights need no meaningful text, but a worker needs a
// tokenizer whose ids cover the model's.
func writeTokenizer(f *gguf.Writer, vocab int) error {
	src, err := gguf.Parse(models.Stories260K)
	if err != nil {
		return err
	}
	spec, err := tokenizer.SpecFromGGUF(src)
	if err != nil {
		return err
	}
	if len(spec.Tokens) > vocab {
		return fmt.Errorf("enginebench: a vocabulary of %d is smaller than the tokenizer's %d tokens", vocab, len(spec.Tokens))
	}
	for i := len(spec.Tokens); i < vocab; i++ {
		spec.Tokens = append(spec.Tokens, fmt.Sprintf("<unused%d>", i))
		if len(spec.Scores) > 0 {
			spec.Scores = append(spec.Scores, 0)
		}
		if len(spec.Types) > 0 {
			spec.Types = append(spec.Types, tokenizer.TokenUnused)
		}
	}
	spec.WriteGGUF(f)
	return nil
}

// WriteModel writes MakeModel's file to path.
func WriteModel(path string, s Shape, fileType string, seed uint64) error {
	b, err := MakeModel(s, fileType, seed)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
