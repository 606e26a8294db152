package workersvc

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/tandem-serve/tandem/engine/enginecheck"
	"github.com/tandem-serve/tandem/engine/openaihttp"
	"github.com/tandem-serve/tandem/tokenizer"
)

// EngineCheck is `tandem engine check`: the worker's own flags for reaching a GPU
// engine (same names, same TANDEM_* variables, so a worker's environment checks
// as it is), and what the check adds.
type EngineCheck struct {
	Worker Config
	// Window is how long KV events are awaited.
	Window time.Duration
	// Timeout bounds each HTTP probe.
	Timeout time.Duration
	// Prefill: the engine will serve a prefill worker.
	Prefill bool
	JSON    bool
}

// RegisterFlags registers the check's flags.
func (c *EngineCheck) RegisterFlags(fs *flag.FlagSet) {
	w := &c.Worker
	fs.StringVar(&w.Engine, "engine", "", "the engine server's kind: "+strings.Join(GPUEngines, ", "))
	fs.StringVar(&w.GPU.URL, "engine-url", "", "the engine server's HTTP address, e.g. http://gpu-host:8000")
	fs.StringVar(&w.Tokenizer, "tokenizer", "", "the model's tokenizer.json or GGUF file (optional: bounds the probe's token ids)")
	fs.StringVar(&w.Model, "model", "", "the served model id the worker will ask for (default: the engine's first)")
	fs.IntVar(&w.ContextLength, "max-model-len", 0, "the context the worker will be given (0: the engine's max_model_len)")
	fs.IntVar(&w.BlockSize, "block-size", 16, "the worker's --block-size, compared with the engine's")
	fs.StringVar(&w.GPU.Bootstrap, "engine-bootstrap", "", "sglang: the engine's bootstrap server, host:port")
	fs.StringVar(&w.GPU.KVEvents.Endpoint, "kv-events-endpoint", "", "the engine's KV event publisher, tcp://host:port (tcp://*:port listens)")
	fs.StringVar(&w.GPU.KVEvents.ReplayEndpoint, "kv-events-replay-endpoint", "", "the engine's KV event replay socket, tcp://host:port")
	fs.StringVar(&w.GPU.KVEvents.Topic, "kv-events-topic", "", "the KV events' ZMQ topic")
	fs.DurationVar(&c.Window, "kv-events-window", 3*time.Second, "how long to listen for KV events after the probe prompt")
	fs.DurationVar(&c.Timeout, "timeout", 30*time.Second, "how long each HTTP probe may take")
	fs.BoolVar(&c.Prefill, "prefill", false, "the engine will serve a tandem prefill worker: a prefill leg without transfer parameters fails")
	fs.BoolVar(&c.JSON, "json", false, "print the report as JSON")
}

// ErrCheckFailed is Run's error when the engine would not serve.
var ErrCheckFailed = errors.New("engine check failed")

// Run checks the engine and prints the report; the error wraps ErrCheckFailed
// when a check failed.
func (c *EngineCheck) Run(ctx context.Context, stdout io.Writer, log *slog.Logger) error {
	w := &c.Worker
	if !isGPU(w.Engine) {
		return fmt.Errorf("--engine %q: want one of %s", w.Engine, strings.Join(GPUEngines, ", "))
	}
	if w.BlockSize <= 0 || w.ContextLength < 0 {
		return fmt.Errorf("--block-size %d must be positive and --max-model-len %d not negative", w.BlockSize, w.ContextLength)
	}
	// What the worker's own checks need and the check does not take.
	w.GPU.TokenMode, w.GPU.MetricsInterval = "auto", time.Second
	w.GPU.Timeouts, w.GPU.Health = openaihttp.DefaultTimeouts, openaihttp.DefaultHealth
	tokPath := w.Tokenizer
	if tokPath == "" {
		w.Tokenizer = "-" // validateGPU wants one; the check does without
	}
	if err := w.validateGPU(); err != nil {
		return err
	}
	var tok tokenizer.Tokenizer
	if tokPath != "" {
		t, err := loadTokenizer(tokPath)
		if err != nil {
			return fmt.Errorf("--tokenizer %s: %w", tokPath, err)
		}
		tok = t
	}
	d, err := w.dialect()
	if err != nil {
		return err
	}
	r, err := enginecheck.Run(ctx, enginecheck.Config{
		URL: w.GPU.URL, Dialect: d, Tokenizer: tok, Model: strings.TrimSpace(w.Model), ContextLength: w.ContextLength,
		BlockSize: w.BlockSize, KVEvents: w.GPU.KVEvents, EventWindow: c.Window, Prefill: c.Prefill, Timeout: c.Timeout, Logger: log,
	})
	if err != nil {
		return err
	}
	if c.JSON {
		err = r.WriteJSON(stdout)
	} else {
		err = r.WriteTable(stdout)
	}
	if err != nil {
		return err
	}
	if !r.OK {
		return fmt.Errorf("%w: %s", ErrCheckFailed, strings.Join(r.Failed(), ", "))
	}
	return nil
}
