package workersvc

import (
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/kvevents"
	"github.com/tandem-serve/tandem/internal/testutil/fakeengine"
	"github.com/tandem-serve/tandem/services"
)

// --engine-record (or TANDEM_ENGINE_RECORD) writes the worker's exchanges with
// its engine, start-up probes and generations, to a capture file in the
// directory; closing the engine closes the file.
func TestEngineRecordFlag(t *testing.T) {
	// The test tokenizer has four tokens: the engine generates within them.
	f := (&fakeengine.Server{Kind: fakeengine.VLLM, TokenIDs: true, Output: []uint32{1, 2}}).Start(t)
	dir := filepath.Join(t.TempDir(), "captures")
	tok := gpuConfig(t, "vllm", f.URL()).Tokenizer
	var cfg Config
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	cfg.RegisterFlags(fs, "aggregated")
	if err := fs.Parse([]string{"--engine", "vllm", "--engine-url", f.URL(), "--tokenizer", tok}); err != nil {
		t.Fatal(err)
	}
	if err := services.ApplyEnv(fs, func(k string) string {
		if k == "TANDEM_ENGINE_RECORD" {
			return dir
		}
		return ""
	}); err != nil {
		t.Fatal(err)
	}
	if cfg.GPU.Record != dir {
		t.Fatalf("TANDEM_ENGINE_RECORD gave %q", cfg.GPU.Record)
	}
	eng, err := cfg.NewEngine(t.Context(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s, err := eng.Generate(t.Context(), engine.Request{ID: "req-1", Prompt: []uint32{0, 1, 2}, MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := s.Next(t.Context()); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "engine-*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("capture files %v", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"path":"/v1/models"`, `"X-Request-Id":"tandem-probe-token-mode"`, `"X-Request-Id":"req-1"`, `"chunks":[`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the capture lacks %s:\n%s", want, b)
		}
	}
}

// A native worker has no engine server to record.
func TestEngineRecordNeedsGPU(t *testing.T) {
	var cfg Config
	cfg.RegisterFlags(flag.NewFlagSet("worker", flag.ContinueOnError), "aggregated")
	cfg.GPU.Record = t.TempDir()
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--engine-record") {
		t.Errorf("--engine-record with --engine native: %v", err)
	}
}

// With KV events, the recorder also writes the publisher's messages.
func TestEngineRecordKVEvents(t *testing.T) {
	f := (&fakeengine.Server{Kind: fakeengine.VLLM, TokenIDs: true, Output: []uint32{1, 2}}).Start(t)
	pub := fakeengine.NewPublisher(t, "kv", fakeengine.MapEncoding)
	dir := t.TempDir()
	cfg := gpuConfig(t, "vllm", f.URL())
	cfg.GPU.Record, cfg.GPU.KVEvents = dir, kvevents.SubscriberConfig{Endpoint: pub.Endpoint, ReplayEndpoint: pub.ReplayEndpoint, Topic: "kv"}
	eng, err := cfg.NewEngine(t.Context(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "engine-*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("capture files %v", files)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		pub.Stored(fakeengine.StoredBlocks{Hashes: []uint64{7}, TokenIDs: make([]uint32, 16), BlockSize: 16})
		b, _ := os.ReadFile(files[0])
		if strings.Contains(string(b), `"zmq":{"replay":false,"frames":["a3Y="`) { // "kv" in base64
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no KV event message in the capture:\n%s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
