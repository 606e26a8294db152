package native

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/kvcache"
)

// modelLogits runs tokens through the loaded model, either one position per
// forward pass (decode) or all at once (prefill), and returns every position's
// logits (decode) or the last one's (prefill).
func modelLogits(t *testing.T, file []byte, tokens []uint32, prefill bool) [][]float32 {
	t.Helper()
	f, err := gguf.Parse(file)
	if err != nil {
		t.Fatal(err)
	}
	mc, w, _, err := loadModel(Config{File: f})
	if err != nil {
		t.Fatal(err)
	}
	const bs = 16
	m := newModel(mc, w, (len(tokens)+bs-1)/bs, bs)
	blocks := make([]kvcache.BlockID, (len(tokens)+bs-1)/bs)
	for i := range blocks {
		blocks[i] = kvcache.BlockID(i)
	}
	ws := m.newWorkspace(len(tokens), 1)
	var out [][]float32
	if prefill {
		lg := m.forward(ws, tokens, []segment{{blocks: blocks, n: len(tokens), logits: true}})
		return [][]float32{append([]float32(nil), lg[0][:mc.VocabSize]...)}
	}
	for pos := range tokens {
		lg := m.forward(ws, tokens[pos:pos+1], []segment{{blocks: blocks, pos0: pos, n: 1, logits: true}})
		out = append(out, append([]float32(nil), lg[0][:mc.VocabSize]...))
	}
	return out
}

// maxRelErr is the largest |got - want| over a row, relative to the row's spread.
func maxRelErr(got []float32, want []float64) float64 {
	var worst, ss float64
	for _, v := range want {
		ss += v * v
	}
	scale := math.Sqrt(ss / float64(len(want)))
	for i, v := range want {
		worst = max(worst, math.Abs(float64(got[i])-v))
	}
	return worst / scale
}

var archShapes = []testShape{
	// llama: GQA, separate output, Llama 3 rope_freqs.
	{arch: "llama", d: 256, layers: 2, heads: 4, kvHeads: 2, ffn: 512, vocab: 320, ropeFreqs: true, theta: 10000},
	// qwen2: QKV biases, NeoX rope, tied embeddings, a large rope base.
	{arch: "qwen2", d: 256, layers: 2, heads: 8, kvHeads: 2, ffn: 512, vocab: 288, tied: true, theta: 1e6},
}

// Every architecture and tensor type computes what a plain float64 forward pass over
// the same (quantized and dequantized) weights computes. Unquantized weights agree to
// f32 rounding; quantized ones within what quantizing the activations to 8 bits
// costs, as llama.cpp's kernels do too.
func TestArchitecturesMatchReference(t *testing.T) {
	tokens := []uint32{1, 17, 200, 5, 99, 250, 3, 42, 7, 11, 180, 64, 2, 33, 150, 8, 19, 77, 101}
	for _, s := range archShapes {
		base := randomTestWeights(s, 7)
		for _, typ := range []gguf.Type{gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16, gguf.TypeQ8_0, gguf.TypeQ4_0,
			gguf.TypeQ4_1, gguf.TypeQ5_0, gguf.TypeQ5_1, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K} {
			t.Run(fmt.Sprintf("%s/%s", s.arch, typ), func(t *testing.T) {
				w, file := base.as(t, typ)
				want := w.reference(tokens)
				tol := 2e-4
				if !isFloat(typ) {
					tol = 0.15
				}
				worst := 0.0
				for pos, got := range modelLogits(t, file, tokens, false) {
					worst = max(worst, maxRelErr(got, want[pos]))
				}
				if worst > tol {
					t.Errorf("decode: logits differ from the reference by %.3g of their spread (tolerance %g)", worst, tol)
				}
				pre := modelLogits(t, file, tokens, true)[0]
				if e := maxRelErr(pre, want[len(tokens)-1]); e > tol {
					t.Errorf("prefill: last logits differ by %.3g (tolerance %g)", e, tol)
				}
				t.Logf("worst relative error %.3g", worst)
			})
		}
	}
}

// A file tandem cannot serve is an error at load naming what is wrong.
func TestLoadRefusesWhatItCannotServe(t *testing.T) {
	s := archShapes[0]
	w := randomTestWeights(s, 3)
	load := func(file []byte) error {
		f, err := gguf.Parse(file)
		if err != nil {
			return err
		}
		e, err := New(Config{File: f, NumBlocks: 4})
		if err == nil {
			e.Close()
		}
		return err
	}
	_, good := w.as(t, gguf.TypeF32)
	if err := load(good); err != nil {
		t.Fatalf("good file: %v", err)
	}
	mutate := func(name string, edit func(*testWeights)) []byte {
		c := &testWeights{s: w.s, tensors: map[string][]float32{}, dims: map[string][]uint64{}}
		for _, n := range w.order {
			c.tensors[n], c.dims[n] = w.tensors[n], w.dims[n]
			c.order = append(c.order, n)
		}
		edit(c)
		_, b := c.as(t, gguf.TypeF32)
		return b
	}
	for name, tc := range map[string]struct {
		file []byte
		want string
	}{
		"arch": {mutate("", func(c *testWeights) { c.s.arch = "mamba" }), `unsupported architecture "mamba"`},
		"missing tensor": {mutate("", func(c *testWeights) {
			c.order = c.order[:len(c.order)-3] // drops output_norm and what follows
		}), "missing tensor"},
		"wrong shape": {mutate("", func(c *testWeights) { c.dims["blk.0.attn_k.weight"] = []uint64{256, 64, 2} }), "blk.0.attn_k.weight"},
	} {
		if err := load(tc.file); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.want)
		}
	}
	iq := gguf.TensorInfo{Name: "blk.0.ffn_up.weight", Type: gguf.TypeIQ2_XXS, Dims: []uint64{256, 4}, Data: make([]byte, 4*66)}
	if _, err := linearOf(256, iq); err == nil || !strings.Contains(err.Error(), "IQ2_XXS") {
		t.Errorf("IQ2_XXS weights: %v, want an error naming the type", err)
	}
}
