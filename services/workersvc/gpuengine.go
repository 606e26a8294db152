package workersvc

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/kvevents"
	"github.com/tandem-serve/tandem/engine/openaihttp"
	"github.com/tandem-serve/tandem/engine/sglang"
	"github.com/tandem-serve/tandem/engine/trtllm"
	"github.com/tandem-serve/tandem/engine/vllm"
	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/services/telemetry"
	"github.com/tandem-serve/tandem/tokenizer"
)

// GPUEngines are the engine servers a worker can front (--engine).
var GPUEngines = []string{"vllm", "trtllm", "sglang"}

// GPUEngine is how a worker reaches a GPU engine server.
type GPUEngine struct {
	URL             string
	TokenMode       string
	MetricsInterval time.Duration
	Wait            time.Duration
	// Bootstrap is an SGLang prefill server's bootstrap server as decode servers
	// reach it, host:port.
	Bootstrap string
	// KVEvents is the engine's KV event publisher (vLLM's --kv-events-config).
	KVEvents kvevents.SubscriberConfig
	// Timeouts bound each wait on the engine; Health is how it is probed.
	Timeouts openaihttp.Timeouts
	Health   openaihttp.HealthConfig
	// Record is a directory to write every exchange with the engine to.
	Record string
}

// RegisterFlags registers the GPU engine flags.
func (g *GPUEngine) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&g.URL, "engine-url", "", "vllm, trtllm, sglang: the engine server's HTTP address, e.g. http://gpu-host:8000")
	fs.StringVar(&g.TokenMode, "engine-token-ids", string(openaihttp.TokenAuto),
		"vllm, trtllm, sglang: how generated token ids come back: auto (ask the engine at start), token_ids, logprobs (vLLM's "+
			"return_tokens_as_token_ids) or text (the engine's streamed text passed on exactly, one token a chunk)")
	fs.DurationVar(&g.MetricsInterval, "engine-metrics-interval", time.Second, "vllm, trtllm, sglang: how often the engine's load is scraped")
	fs.DurationVar(&g.Wait, "engine-wait", 10*time.Minute, "vllm, trtllm, sglang: how long to wait at start for the engine to serve its model")
	fs.StringVar(&g.Bootstrap, "engine-bootstrap", "", "sglang prefill workers: the engine's bootstrap server as decode engines reach it, "+
		"host:port (default: --engine-url's host and port "+strconv.Itoa(sglang.DefaultBootstrapPort)+")")
	t, h := openaihttp.DefaultTimeouts, openaihttp.DefaultHealth
	fs.DurationVar(&g.Timeouts.Header, "engine-header-timeout", t.Header,
		"vllm, trtllm, sglang: how long a streamed request waits for the engine's response headers before it fails")
	fs.DurationVar(&g.Timeouts.FirstToken, "engine-first-token-timeout", t.FirstToken,
		"vllm, trtllm, sglang: how long a request waits for its first token (the engine's queue and prefill), and a prefill leg for its answer")
	fs.DurationVar(&g.Timeouts.Token, "engine-token-timeout", t.Token, "vllm, trtllm, sglang: the longest gap between two streamed tokens before the request fails")
	fs.DurationVar(&g.Health.Interval, "engine-health-interval", h.Interval, "vllm, trtllm, sglang: how often the engine's /health is probed")
	fs.IntVar(&g.Health.Failures, "engine-health-failures", h.Failures,
		"vllm, trtllm, sglang: failed health probes in a row after which the worker turns NOT_SERVING (it serves again at the first probe that passes)")
	fs.StringVar(&g.KVEvents.Endpoint, "kv-events-endpoint", "", "vllm (and engines that publish vLLM's KV events): the engine's ZMQ "+
		"publisher, e.g. tcp://gpu-host:5557 (dialled), or tcp://*:5557 to listen for a publisher that dials (empty: no events; routing uses load alone)")
	fs.StringVar(&g.KVEvents.ReplayEndpoint, "kv-events-replay-endpoint", "", "the engine's KV event replay socket, e.g. tcp://gpu-host:5558 "+
		"(empty: a lost event resynchronises instead of replaying)")
	fs.StringVar(&g.KVEvents.Topic, "kv-events-topic", "", "the KV events' ZMQ topic (vLLM's kv-events-config topic)")
	fs.StringVar(&g.Record, "engine-record", "", "vllm, trtllm, sglang: write every HTTP exchange with the engine (requests, responses, "+
		"streamed bodies with their timing) to a JSON-lines file in this directory, for debugging and replay tests (docs/ENGINES.md)")
}

// timeouts are the bounds, named by the flags that set them.
func (g GPUEngine) timeouts() openaihttp.Timeouts {
	t := g.Timeouts
	t.HeaderSetting, t.FirstTokenSetting, t.TokenSetting = "--engine-header-timeout", "--engine-first-token-timeout", "--engine-token-timeout"
	return t
}

func isGPU(name string) bool { return slices.Contains(GPUEngines, name) }

// validateGPU checks the flags of a worker fronting an engine server.
func (c *Config) validateGPU() error {
	g := c.GPU
	u, err := url.Parse(g.URL)
	if g.URL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--engine %s needs --engine-url http://host:port (got %q)", c.Engine, g.URL)
	}
	if c.Tokenizer == "" {
		return fmt.Errorf("--engine %s needs --tokenizer: the model's tokenizer.json or a GGUF file", c.Engine)
	}
	if !slices.Contains(openaihttp.TokenModes, openaihttp.TokenMode(g.TokenMode)) {
		return fmt.Errorf("--engine-token-ids %q: want one of %v", g.TokenMode, openaihttp.TokenModes)
	}
	if g.MetricsInterval <= 0 || g.Wait < 0 {
		return errors.New("--engine-metrics-interval must be positive and --engine-wait not negative")
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--engine-header-timeout", g.Timeouts.Header}, {"--engine-first-token-timeout", g.Timeouts.FirstToken},
		{"--engine-token-timeout", g.Timeouts.Token}, {"--engine-health-interval", g.Health.Interval}} {
		if d.v <= 0 {
			return fmt.Errorf("%s %s must be positive", d.flag, d.v)
		}
	}
	if g.Health.Failures < 1 {
		return fmt.Errorf("--engine-health-failures %d must be at least 1", g.Health.Failures)
	}
	if g.Bootstrap != "" {
		if c.Engine != "sglang" {
			return fmt.Errorf("--engine-bootstrap is for --engine sglang, not %s", c.Engine)
		}
		if _, _, err := bootstrapAddr(g.Bootstrap); err != nil {
			return fmt.Errorf("--engine-bootstrap %q: %v", g.Bootstrap, err)
		}
	}
	if c.ContextLength < 0 {
		return fmt.Errorf("--max-model-len %d must not be negative", c.ContextLength)
	}
	if g.KVEvents.Endpoint == "" && g.KVEvents.ReplayEndpoint != "" {
		return errors.New("--kv-events-replay-endpoint without --kv-events-endpoint")
	}
	return g.KVEvents.Validate()
}

func bootstrapAddr(hp string) (string, int, error) {
	host, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 || host == "" {
		return "", 0, errors.New("want host:port")
	}
	return host, port, nil
}

// dialect is the engine's, with an SGLang prefill worker's bootstrap server.
func (c *Config) dialect() (openaihttp.Dialect, error) {
	switch c.Engine {
	case "vllm":
		return vllm.Dialect(), nil
	case "trtllm":
		return trtllm.Dialect(), nil
	case "sglang":
		b := sglang.Bootstrap{}
		if hp := c.GPU.Bootstrap; hp != "" {
			b.Host, b.Port, _ = bootstrapAddr(hp)
		} else if u, err := url.Parse(c.GPU.URL); err == nil {
			b.Host, b.Port = u.Hostname(), sglang.DefaultBootstrapPort
		}
		return sglang.Dialect(b), nil
	}
	return openaihttp.Dialect{}, fmt.Errorf("--engine %q is not a GPU engine", c.Engine)
}

// loadTokenizer reads --tokenizer: a GGUF file (its tokenizer metadata) or a
// Hugging Face tokenizer.json.
func loadTokenizer(path string) (tokenizer.Tokenizer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if bytes.HasPrefix(b, []byte("GGUF")) {
		f, err := gguf.Parse(b)
		if err != nil {
			return nil, err
		}
		return tokenizer.FromGGUF(f)
	}
	return tokenizer.FromHuggingFace(b)
}

// gpuEngine connects to the engine server, waiting for it to serve, and starts
// following its KV events when it publishes them.
func (c *Config) gpuEngine(ctx context.Context, log *slog.Logger) (engine.Engine, error) {
	tok, err := loadTokenizer(c.Tokenizer)
	if err != nil {
		return nil, fmt.Errorf("--tokenizer %s: %w", c.Tokenizer, err)
	}
	d, err := c.dialect()
	if err != nil {
		return nil, err
	}
	var mirror *kvevents.Mirror
	if c.GPU.KVEvents.Endpoint != "" {
		mirror = kvevents.NewMirror(c.BlockSize, 4096)
	}
	var rec *openaihttp.Recorder
	var hc *http.Client
	if c.GPU.Record != "" {
		if rec, err = openaihttp.NewRecorder(c.GPU.Record, nil); err != nil {
			return nil, fmt.Errorf("--engine-record: %w", err)
		}
		hc = &http.Client{Transport: rec}
		log.Info("recording the exchanges with the engine", "file", rec.Path())
	}
	if c.tracer != nil {
		if hc == nil {
			hc = openaihttp.DefaultHTTPClient()
		}
		hc.Transport = telemetry.TraceTransport(hc.Transport, c.tracer)
	}
	eng, err := openaihttp.New(ctx, openaihttp.Config{
		URL: c.GPU.URL, Dialect: d, Tokenizer: tok, Model: c.EngineModel(), ContextLength: c.ContextLength, BlockSize: c.BlockSize,
		TotalBlocks: c.NumBlocks, TokenMode: openaihttp.TokenMode(c.GPU.TokenMode), MetricsInterval: c.GPU.MetricsInterval,
		Wait: c.GPU.Wait, Timeouts: c.GPU.timeouts(), Health: c.GPU.Health, Cache: mirror, HTTP: hc, Logger: log,
		Waiting: c.onEngineWait,
	})
	if err != nil && rec != nil {
		_ = rec.Close()
	}
	if errors.Is(err, openaihttp.ErrNoContextLength) {
		return nil, fmt.Errorf("%w: give --max-model-len", err)
	}
	if err != nil {
		return nil, err
	}
	if mirror == nil {
		if rec == nil {
			return eng, nil
		}
		return &withEvents{Engine: eng, rec: rec}, nil
	}
	events := c.GPU.KVEvents
	if rec != nil {
		events.OnFrames = rec.OnFrames
	}
	sub, err := kvevents.Subscribe(events, mirror, log.With("engine", c.Engine))
	if err != nil {
		_ = eng.Close()
		if rec != nil {
			_ = rec.Close()
		}
		return nil, fmt.Errorf("KV events: %w", err)
	}
	return &withEvents{Engine: eng, sub: sub, mirror: mirror, rec: rec}, nil
}

// EngineModel is the served model id to ask the engine server for: --model when
// it was given, else whatever the engine serves.
func (c *Config) EngineModel() string {
	if c.Model == DefaultModel {
		return ""
	}
	return strings.TrimSpace(c.Model)
}

// withEvents is an engine server with what runs beside it: the subscriber that
// follows its KV events (nil without), the recorder of its exchanges (nil
// without). Closing it stops both.
type withEvents struct {
	*openaihttp.Engine
	sub    *kvevents.Subscriber
	mirror *kvevents.Mirror
	rec    *openaihttp.Recorder
}

func (w *withEvents) Close() error {
	if w.sub != nil {
		w.sub.Close()
	}
	err := w.Engine.Close()
	if w.rec != nil {
		err = errors.Join(err, w.rec.Close())
	}
	return err
}
