package native

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/internal/testutil/testmodel"
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

var archShapes = []testmodel.Shape{
	// llama: GQA, separate output, Llama 3 rope_freqs.
	{Arch: "llama", D: 256, Layers: 2, Heads: 4, KVHeads: 2, FFN: 512, Vocab: 320, RopeFreqs: true, Theta: 10000},
	// qwen2: QKV biases, NeoX rope, tied embeddings, a large rope base.
	{Arch: "qwen2", D: 256, Layers: 2, Heads: 8, KVHeads: 2, FFN: 512, Vocab: 288, Tied: true, Theta: 1e6},
	// qwen3: per-head Q and K norms, heads wider than d_model/heads.
	{Arch: "qwen3", D: 256, Layers: 2, Heads: 4, KVHeads: 2, KeyLength: 128, FFN: 512, Vocab: 288, Tied: true, Theta: 1e6},
	// phi3: fused QKV and gate|up, a sliding window on every layer.
	{Arch: "phi3", D: 256, Layers: 2, Heads: 4, KVHeads: 2, FFN: 512, Vocab: 320, Theta: 1e4},
	// gemma2: sandwich norms, GeGLU, both soft caps, every other layer sliding.
	{Arch: "gemma2", D: 256, Layers: 3, Heads: 4, KVHeads: 2, KeyLength: 128, FFN: 512, Vocab: 288, Tied: true, Theta: 1e4},
	// gemma3: Gemma 2 with Q and K norms, no soft caps, five sliding layers to one
	// global one, with their own rope base; linear rope scaling on the global ones.
	{Arch: "gemma3", D: 256, Layers: 7, Heads: 4, KVHeads: 2, KeyLength: 128, FFN: 512, Vocab: 288, Tied: true, Theta: 1e6},
	// olmo2: norms after attention and the MLP only, Q and K norms over all heads.
	{Arch: "olmo2", D: 256, Layers: 2, Heads: 4, KVHeads: 2, FFN: 512, Vocab: 288, Theta: 5e5},
	// granite: Llama with embedding, residual, attention and logit multipliers.
	{Arch: "granite", D: 256, Layers: 2, Heads: 4, KVHeads: 2, FFN: 512, Vocab: 288, Tied: true, Theta: 1e4},
}

// archMeta is each family's own metadata for the test shapes: windows shorter than
// the test's tokens, and soft caps low enough to change the scores.
var archMeta = map[string][]testmodel.KV{
	"phi3": {{Key: "phi3.attention.sliding_window", Val: uint32(7)}},
	"gemma2": {{Key: "gemma2.attention.sliding_window", Val: uint32(7)},
		{Key: "gemma2.attn_logit_softcapping", Val: float32(3)}, {Key: "gemma2.final_logit_softcapping", Val: float32(5)}},
	"gemma3": {{Key: "gemma3.attention.sliding_window", Val: uint32(7)},
		{Key: "gemma3.rope.scaling.type", Val: "linear"}, {Key: "gemma3.rope.scaling.factor", Val: float32(8)}},
	"granite": {{Key: "granite.embedding_scale", Val: float32(3)}, {Key: "granite.residual_scale", Val: float32(0.5)},
		{Key: "granite.attention.scale", Val: float32(0.1)}, {Key: "granite.logit_scale", Val: float32(2)}},
}

// randomArch draws a test shape's weights, with its family's metadata.
func randomArch(s testmodel.Shape, seed uint64) *testmodel.Weights {
	w := testmodel.Random(s, seed)
	w.Meta = archMeta[s.Arch]
	return w
}

// Every architecture and tensor type computes what a plain float64 forward pass over
// the same (quantized and dequantized) weights computes. Unquantized weights agree to
// f32 rounding; quantized ones within what quantizing the activations to 8 bits
// costs, as llama.cpp's kernels do too.
func TestArchitecturesMatchReference(t *testing.T) {
	tokens := []uint32{1, 17, 200, 5, 99, 250, 3, 42, 7, 11, 180, 64, 2, 33, 150, 8, 19, 77, 101}
	for _, s := range archShapes {
		base := randomArch(s, 7)
		for _, typ := range []gguf.Type{gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16, gguf.TypeQ8_0, gguf.TypeQ4_0,
			gguf.TypeQ4_1, gguf.TypeQ5_0, gguf.TypeQ5_1, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K} {
			t.Run(fmt.Sprintf("%s/%s", s.Arch, typ), func(t *testing.T) {
				w, file := base.As(t, typ)
				want := reference(w, tokens)
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
	w := testmodel.Random(s, 3)
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
	_, good := w.As(t, gguf.TypeF32)
	if err := load(good); err != nil {
		t.Fatalf("good file: %v", err)
	}
	mutate := func(name string, edit func(*testmodel.Weights)) []byte {
		c := &testmodel.Weights{S: w.S, Tensors: map[string][]float32{}, Dims: map[string][]uint64{}}
		for _, n := range w.Order {
			c.Tensors[n], c.Dims[n] = w.Tensors[n], w.Dims[n]
			c.Order = append(c.Order, n)
		}
		edit(c)
		_, b := c.As(t, gguf.TypeF32)
		return b
	}
	for name, tc := range map[string]struct {
		file []byte
		want string
	}{
		"arch": {mutate("", func(c *testmodel.Weights) { c.S.Arch = "mamba" }), `unsupported architecture "mamba"`},
		"missing tensor": {mutate("", func(c *testmodel.Weights) {
			c.Order = c.Order[:len(c.Order)-3] // drops output_norm and what follows
		}), "missing tensor"},
		"wrong shape": {mutate("", func(c *testmodel.Weights) { c.Dims["blk.0.attn_k.weight"] = []uint64{256, 64, 2} }), "blk.0.attn_k.weight"},
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

// A family's file that lacks what its forward pass needs, or has what tandem does
// not compute, is refused at load with an error naming the key or tensor.
func TestLoadRefusesFamilyGaps(t *testing.T) {
	shape := func(arch string) testmodel.Shape {
		i := slices.IndexFunc(archShapes, func(s testmodel.Shape) bool { return s.Arch == arch })
		return archShapes[i]
	}
	load := func(w *testmodel.Weights) error {
		_, b := w.As(t, gguf.TypeF32)
		f, err := gguf.Parse(b)
		if err != nil {
			return err
		}
		_, _, _, err = loadModel(Config{File: f})
		return err
	}
	without := func(arch, key string) *testmodel.Weights {
		w := randomArch(shape(arch), 5)
		w.Meta = slices.DeleteFunc(slices.Clone(w.Meta), func(kv testmodel.KV) bool { return kv.Key == key })
		return w
	}
	longRope := randomArch(shape("phi3"), 5)
	hd := shape("phi3").D / shape("phi3").Heads
	longRope.Tensors["rope_factors_long.weight"] = make([]float32, hd/2)
	longRope.Dims["rope_factors_long.weight"] = []uint64{uint64(hd / 2)}
	longRope.Order = append(slices.Clone(longRope.Order), "rope_factors_long.weight")
	for name, tc := range map[string]struct {
		w    *testmodel.Weights
		want string
	}{
		"granite scale":  {without("granite", "granite.residual_scale"), "granite.residual_scale"},
		"gemma3 window":  {without("gemma3", "gemma3.attention.sliding_window"), "gemma3.attention.sliding_window"},
		"phi3 window":    {without("phi3", "phi3.attention.sliding_window"), "phi3.attention.sliding_window"},
		"phi3 long rope": {longRope, "LongRoPE"},
	} {
		if err := load(tc.w); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.want)
		}
	}
	w := randomArch(shape("qwen3"), 5)
	w.S.Arch = "gemma3n"
	if err := load(w); err == nil || !strings.Contains(err.Error(), `unsupported architecture "gemma3n"`) ||
		!strings.Contains(err.Error(), "qwen3") {
		t.Errorf("gemma3n: %v, want an error naming it and the supported architectures", err)
	}
}
