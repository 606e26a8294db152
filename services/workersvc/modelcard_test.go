package workersvc

import (
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/internal/testutil/testmodel"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

func TestModelCard(t *testing.T) {
	for _, c := range []struct {
		name          string
		cfg           Config
		model, tokKey string
	}{
		{"embedded", Config{Engine: "native", Model: "stories260K"}, "stories260K", "gguf"},
		{"random shape", Config{Engine: "native", Model: "tiny"}, "tandem-tiny", "cl100k_base"},
		{"served name", Config{Engine: "native", Model: "stories260K", ServedName: "my-model"}, "my-model", "gguf"},
		{"sim", Config{Engine: "sim", BlockSize: 16}, "tandem-sim", "cl100k_base"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.BlockSize = 16
			c.cfg.NumBlocks = 64
			eng, err := c.cfg.NewEngine(t.Context(), slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer eng.Close()
			card, err := modelCard(c.cfg, eng)
			if err != nil {
				t.Fatal(err)
			}
			info := eng.Info()
			if card.GetModel() != c.model || card.GetFingerprint() != info.Layout.Fingerprint || card.GetBlockSize() != 16 ||
				int(card.GetContextLength()) != info.ContextLength || int(card.GetVocabSize()) != info.VocabSize {
				t.Errorf("card %v for info %+v", card, info)
			}
			switch tk := card.GetTokenizer().(type) {
			case *workerv1.ModelCard_TokenizerName:
				if tk.TokenizerName != c.tokKey {
					t.Errorf("tokenizer %q", tk.TokenizerName)
				}
			case *workerv1.ModelCard_TokenizerGguf:
				f, err := gguf.Parse(tk.TokenizerGguf)
				if err != nil || c.tokKey != "gguf" {
					t.Fatalf("tokenizer gguf: %v", err)
				}
				if toks, err := f.Strings("tokenizer.ggml.tokens"); err != nil || len(toks) != 512 || len(f.Tensors()) != 0 {
					t.Errorf("tokenizer gguf holds %d tokens (%v) and %d tensors", len(toks), err, len(f.Tensors()))
				}
			default:
				t.Errorf("tokenizer %T", tk)
			}
		})
	}
}

func TestTokenizerFlag(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "tokenizer.json")
	// A minimal byte-level BPE tokenizer.json, as Hugging Face writes GPT-2's.
	if err := os.WriteFile(good, []byte(`{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2,"<|endoftext|>":3},"merges":["a b"]},
		"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false},
		"added_tokens":[{"id":3,"content":"<|endoftext|>","special":true}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"model":{"type":"Unigram"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var cfg Config
	cfg.RegisterFlags(flag.NewFlagSet("worker", flag.ContinueOnError), "aggregated")
	cfg.NumBlocks, cfg.Tokenizer = 64, bad
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--tokenizer") {
		t.Errorf("a tokenizer.json tandem cannot read: %v", err)
	}
	cfg.Tokenizer = filepath.Join(dir, "absent.json")
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--tokenizer") {
		t.Errorf("a missing tokenizer.json: %v", err)
	}
	cfg.Tokenizer = good
	if err := cfg.Validate(); err != nil {
		t.Fatalf("tokenizer.json: %v", err)
	}
	eng, err := cfg.NewEngine(t.Context(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	card, err := modelCard(cfg, eng)
	if err != nil {
		t.Fatal(err)
	}
	if tk, ok := card.GetTokenizer().(*workerv1.ModelCard_TokenizerJson); !ok || !strings.Contains(string(tk.TokenizerJson), `"merges"`) {
		t.Errorf("card tokenizer %T, want the tokenizer.json as given", card.GetTokenizer())
	}
}

// A model file without a tokenizer is refused at start, naming the way out,
// rather than published to a frontend that could never serve it.
func TestModelWithoutTokenizer(t *testing.T) {
	_, file := testmodel.Random(testmodel.Shape{Arch: "llama", D: 64, Layers: 1, Heads: 2, KVHeads: 1, FFN: 128, Vocab: 64, Theta: 1e4}, 1).
		As(t, gguf.TypeF32)
	path := filepath.Join(t.TempDir(), "no-tokenizer.gguf")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Engine: "native", Model: path, BlockSize: 16, NumBlocks: 16}
	eng, err := cfg.NewEngine(t.Context(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if _, err := modelCard(cfg, eng); err == nil || !strings.Contains(err.Error(), "--tokenizer") {
		t.Errorf("card of a model without a tokenizer: %v, want an error naming --tokenizer", err)
	}
}
