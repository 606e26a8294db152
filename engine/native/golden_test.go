package native

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/internal/testutil/testmodel"
)

// -update-arch-models rewrites testdata/arch/*.gguf from their seeds, and the
// goldens of the families llama.cpp's snapshot cannot run (qwen3, gemma3) from the
// float64 reference. The llama.cpp goldens are made outside the repository (see
// testdata/arch/README.md).
var updateArchModels = flag.Bool("update-arch-models", false, "rewrite testdata/arch models and float64-reference goldens")

// archModel is one committed random-weight model of a family, with the vocabulary
// and chat template its real models carry.
type archModel struct {
	shape    testmodel.Shape
	template string   // the real model's published chat template (chattemplate/testdata/templates)
	bos, eos string   // its BOS and EOS text
	specials []string // the control tokens its template writes
	// llamaCpp: the golden is llama.cpp's; otherwise the float64 reference's,
	// because the llama.cpp snapshot the goldens come from predates the family.
	llamaCpp bool
}

var archModels = []archModel{
	// Untied, as Qwen3's larger models are: a random model with a tied embedding
	// repeats its input.
	{testmodel.Shape{Arch: "qwen3", D: 64, Layers: 2, Heads: 4, KVHeads: 2, KeyLength: 32, FFN: 128, Vocab: 320, Theta: 1e6},
		"qwen3.jinja", "<|endoftext|>", "<|im_end|>", []string{"<|im_start|>", "<think>", "</think>"}, false},
	{testmodel.Shape{Arch: "phi3", D: 64, Layers: 2, Heads: 4, KVHeads: 2, FFN: 128, Vocab: 320, Theta: 1e4},
		"phi-3-mini.jinja", "<s>", "<|endoftext|>", []string{"<|user|>", "<|assistant|>", "<|end|>", "<|system|>", "</s>"}, true},
	// llama.cpp knows a Gemma 2 only by its layer count (26, 42 or 46).
	{testmodel.Shape{Arch: "gemma2", D: 32, Layers: 26, Heads: 2, KVHeads: 1, KeyLength: 32, FFN: 64, Vocab: 320, Tied: true, Theta: 1e4},
		"gemma-it.jinja", "<bos>", "<eos>", []string{"<start_of_turn>", "<end_of_turn>"}, true},
	{testmodel.Shape{Arch: "gemma3", D: 32, Layers: 7, Heads: 2, KVHeads: 1, KeyLength: 32, FFN: 64, Vocab: 320, Tied: true, Theta: 1e6},
		"gemma-3-it.jinja", "<bos>", "<eos>", []string{"<start_of_turn>", "<end_of_turn>", "<start_of_image>"}, false},
	// llama.cpp's snapshot norms OLMo 2's keys over d_model: as many KV heads as heads.
	{testmodel.Shape{Arch: "olmo2", D: 64, Layers: 2, Heads: 4, KVHeads: 4, FFN: 128, Vocab: 320, Theta: 5e5},
		"olmo-2-instruct.jinja", "<|endoftext|>", "<|endoftext|>", []string{"<|system|>", "<|user|>", "<|assistant|>"}, true},
	{testmodel.Shape{Arch: "granite", D: 64, Layers: 2, Heads: 4, KVHeads: 2, FFN: 128, Vocab: 320, Theta: 1e4},
		"granite-3.0-instruct.jinja", "<|end_of_text|>", "<|end_of_text|>",
		[]string{"<|start_of_role|>", "<|end_of_role|>", "<|tool_call|>"}, true},
}

// The prompt every golden starts from, and how many tokens it draws greedily.
var (
	goldenPrompt = []uint32{1, 300, 17, 264, 5, 99, 250, 42}
	goldenSteps  = 64
)

// goldenFile is what testdata/arch/<arch>.golden.json holds.
type goldenFile struct {
	Source string       `json:"source"`
	Prompt []uint32     `json:"prompt"`
	Steps  []goldenStep `json:"steps"`
}

type goldenStep struct {
	Token uint32       `json:"token"`
	Top   [][2]float64 `json:"top"` // the 20 largest logits: [token, logit]
}

func archModelPath(arch, ext string) string { return filepath.Join("testdata", "arch", arch+ext) }

// vocab is a SentencePiece vocabulary of n tokens: unknown, BOS, EOS, the 256
// bytes, the template's control tokens, then filler words. Real vocabularies are
// far larger; the forward pass only needs the size, and llama.cpp needs one.
func (am archModel) vocab() []testmodel.KV {
	n := am.shape.Vocab
	toks := []string{"<unk>", am.bos, am.eos}
	types := []int32{2, 3, 3}
	if am.eos == am.bos {
		toks[2] = "<pad>"
	}
	for b := range 256 {
		toks, types = append(toks, fmt.Sprintf("<0x%02X>", b)), append(types, 6)
	}
	for _, s := range am.specials {
		toks, types = append(toks, s), append(types, 3)
	}
	for i := 0; len(toks) < n; i++ {
		toks, types = append(toks, fmt.Sprintf("\u2581w%d", i)), append(types, 1)
	}
	scores := make([]float32, n)
	for i := range scores {
		scores[i] = -float32(i)
	}
	eos := uint32(2)
	if am.eos == am.bos {
		eos = 1
	}
	tmpl, err := os.ReadFile(filepath.Join("..", "..", "chattemplate", "testdata", "templates", am.template))
	if err != nil {
		panic(err)
	}
	return []testmodel.KV{
		{Key: "tokenizer.ggml.model", Val: "llama"}, {Key: "tokenizer.ggml.tokens", Val: toks},
		{Key: "tokenizer.ggml.scores", Val: scores}, {Key: "tokenizer.ggml.token_type", Val: types},
		{Key: "tokenizer.ggml.bos_token_id", Val: uint32(1)}, {Key: "tokenizer.ggml.eos_token_id", Val: eos},
		{Key: "tokenizer.ggml.unknown_token_id", Val: uint32(0)}, {Key: "tokenizer.chat_template", Val: string(tmpl)},
	}
}

// weights draws the model from its seed, with its family's keys and vocabulary.
func (am archModel) weights() *testmodel.Weights {
	w := randomArch(am.shape, 11)
	if am.shape.Arch == "phi3" || am.shape.Arch == "gemma2" || am.shape.Arch == "gemma3" {
		w.Meta = []testmodel.KV{{Key: am.shape.Arch + ".attention.sliding_window", Val: uint32(20)}}
		w.Meta = append(w.Meta, archMeta[am.shape.Arch][1:]...)
	}
	w.Meta = append(slices.Clip(w.Meta), am.vocab()...)
	if am.shape.Arch == "gemma2" || am.shape.Arch == "gemma3" {
		// With the embedding tied, a random model repeats its input unless the
		// branches outweigh the embedding in the residual stream: Gemma's post-norms
		// set their size, so they are made larger than randmodel's.
		for name, v := range w.Tensors {
			if strings.HasSuffix(name, "post_attention_norm.weight") || strings.HasSuffix(name, "post_ffw_norm.weight") {
				for i := range v {
					v[i] *= 16
				}
			}
		}
	}
	return w
}

func TestUpdateArchModels(t *testing.T) {
	if !*updateArchModels {
		t.Skip("run with -update-arch-models to rewrite testdata/arch")
	}
	for _, am := range archModels {
		w, b := am.weights().As(t, gguf.TypeF32)
		if err := os.WriteFile(archModelPath(am.shape.Arch, ".gguf"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if am.llamaCpp {
			continue
		}
		g := goldenFile{Source: "tandem's float64 reference forward pass (refmodel_test.go), from " +
			"the family's published description; llama.cpp c392e5094deaf2d1a7c18683214f007fad3fe42b predates " + am.shape.Arch}
		g.Prompt = goldenPrompt
		tokens := slices.Clone(goldenPrompt)
		for range goldenSteps {
			lg := reference(w, tokens)
			last := lg[len(lg)-1]
			idx := make([]int, len(last))
			for i := range idx {
				idx[i] = i
			}
			sort.SliceStable(idx, func(a, b int) bool { return last[idx[a]] > last[idx[b]] })
			st := goldenStep{Token: uint32(idx[0])}
			for _, i := range idx[:20] {
				st.Top = append(st.Top, [2]float64{float64(i), last[i]})
			}
			g.Steps = append(g.Steps, st)
			tokens = append(tokens, st.Token)
		}
		b, err := json.MarshalIndent(g, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(archModelPath(am.shape.Arch, ".golden.json"), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// goldenTolerance is how far a top-20 logit may be from the golden's: f32 rounding
// against the float64 reference; against llama.cpp, its own f32 kernels' order of
// summation, and for Gemma 2 its GELU, which it looks up in a table of F16 values.
func goldenTolerance(am archModel) float64 {
	switch {
	case !am.llamaCpp:
		return 1e-4
	case am.shape.Arch == "gemma2":
		return 5e-3
	}
	return 1e-3
}

// Each committed model greedily draws the golden's 64 tokens through the engine,
// and its logits at every step are the golden's top 20 within goldenTolerance.
func TestArchGoldens(t *testing.T) {
	for _, am := range archModels {
		t.Run(am.shape.Arch, func(t *testing.T) {
			file, err := os.ReadFile(archModelPath(am.shape.Arch, ".gguf"))
			if err != nil {
				t.Fatal(err)
			}
			gb, err := os.ReadFile(archModelPath(am.shape.Arch, ".golden.json"))
			if err != nil {
				t.Fatal(err)
			}
			var g goldenFile
			if err := json.Unmarshal(gb, &g); err != nil {
				t.Fatal(err)
			}
			want := make([]uint32, len(g.Steps))
			for i, st := range g.Steps {
				want[i] = st.Token
			}
			f, err := gguf.Parse(file)
			if err != nil {
				t.Fatal(err)
			}
			e := newTestEngine(t, Config{File: f, Model: am.shape.Arch, NumBlocks: 16})
			got, _ := generate(t, e, engine.Request{ID: "golden", Prompt: g.Prompt, MaxTokens: len(want)})
			if !slices.Equal(got, want) {
				t.Errorf("greedy tokens differ from %s:\n got %v\nwant %v", g.Source, got, want)
			}
			all := append(slices.Clone(g.Prompt), want...)
			logits := modelLogits(t, file, all[:len(all)-1], false)
			tol, worst := goldenTolerance(am), 0.0
			for i, st := range g.Steps {
				row := logits[len(g.Prompt)-1+i]
				for _, top := range st.Top {
					d := math.Abs(float64(row[int(top[0])]) - top[1])
					worst = max(worst, d)
					if d > tol {
						t.Fatalf("step %d: logit of token %d is %g, golden %g (tolerance %g)", i, int(top[0]), row[int(top[0])], top[1], tol)
					}
				}
			}
			t.Logf("largest top-20 logit difference %.3g (tolerance %g)", worst, tol)
		})
	}
}
