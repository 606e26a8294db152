package workersvc

import (
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/internal/testutil/fakeengine"
)

// gpuConfig is a worker fronting engine kind at url, with flags' defaults and a
// minimal tokenizer.json.
func gpuConfig(t *testing.T, kind, url string) Config {
	t.Helper()
	tok := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(tok, []byte(`{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2,"<|endoftext|>":3},"merges":["a b"]},
		"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false},
		"added_tokens":[{"id":3,"content":"<|endoftext|>","special":true}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var cfg Config
	cfg.RegisterFlags(flag.NewFlagSet("worker", flag.ContinueOnError), "aggregated")
	cfg.Engine, cfg.GPU.URL, cfg.Tokenizer = kind, url, tok
	return cfg
}

// The engine packages speak of their config; the worker's messages name the flags.
func TestGPUErrorsNameFlags(t *testing.T) {
	cfg := gpuConfig(t, "vllm", "http://127.0.0.1:1")
	cfg.GPU.KVEvents.ReplayEndpoint = "tcp://h:5558"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--kv-events-replay-endpoint without --kv-events-endpoint") {
		t.Errorf("a replay endpoint alone: %v", err)
	}

	// TRT-LLM reports no max_model_len: the worker must be told, by flag.
	f := (&fakeengine.Server{Kind: fakeengine.TRTLLM, TokenIDs: true}).Start(t)
	cfg = gpuConfig(t, "trtllm", f.URL())
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	_, err := cfg.NewEngine(t.Context(), slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "give --max-model-len") || !strings.Contains(err.Error(), "max_model_len") {
		t.Errorf("an engine without max_model_len: %v", err)
	}
}
