// Package enginecheck probes a GPU engine server the way a tandem worker would
// use it, and reports what tandem will use and what is missing: the served
// model and its context, how token ids come back, whether the engine's prefill
// leg returns transfer parameters, its health endpoint, its load metrics, and
// its KV events (their encoding, the replay socket, their block size). It is
// `tandem engine check`'s logic; the command parses the flags.
package enginecheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/kvevents"
	"github.com/tandem-serve/tandem/engine/openaihttp"
	"github.com/tandem-serve/tandem/tokenizer"
)

// Config is the engine to check and what the worker in front of it would be
// told.
type Config struct {
	URL     string
	Dialect openaihttp.Dialect
	// Tokenizer is the model's; nil: none given, and the probes use token ids
	// below 1000, which every real vocabulary has.
	Tokenizer     tokenizer.Tokenizer
	Model         string
	ContextLength int
	BlockSize     int
	KVEvents      kvevents.SubscriberConfig
	// EventWindow is how long live events are awaited; 0 means 3 s.
	EventWindow time.Duration
	// Prefill says the engine will serve a tandem prefill worker: a prefill leg
	// without transfer parameters then fails the check instead of warning.
	Prefill bool
	// Timeout bounds each HTTP probe; 0 means 30 s (a cold engine's first
	// completion can be slow).
	Timeout time.Duration
	Logger  *slog.Logger
}

// Run probes the engine and reports. It returns an error only for a Config that
// cannot be checked; what the engine lacks is in the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.BlockSize <= 0 {
		return nil, fmt.Errorf("block size %d: want a positive number of tokens", cfg.BlockSize)
	}
	if cfg.Dialect.Name == "" {
		return nil, errors.New("no engine dialect")
	}
	if err := cfg.KVEvents.Validate(); err != nil {
		return nil, err
	}
	if cfg.EventWindow <= 0 {
		cfg.EventWindow = 3 * time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	tok := cfg.Tokenizer
	if tok == nil {
		tok = noTokenizer{}
	}
	r := &Report{Engine: cfg.Dialect.Name, URL: cfg.URL, OK: true, Metrics: map[string]string{}}
	ictx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	e, models, err := openaihttp.Inspect(ictx, openaihttp.Config{
		URL: cfg.URL, Dialect: cfg.Dialect, Tokenizer: tok, Model: cfg.Model, ContextLength: cfg.ContextLength,
		BlockSize: cfg.BlockSize, Logger: cfg.Logger,
	})
	cancel()
	for _, m := range models {
		r.Models = append(r.Models, m.ID)
	}
	if err != nil {
		check := "model"
		if len(models) == 0 && !strings.Contains(err.Error(), "serves no model") {
			check = "server"
		}
		r.add(check, Fail, err.Error(), "a worker waits for the engine to serve (--engine-wait), then exits")
		return r, nil
	}
	info := e.Info()
	r.Model, r.ContextLength = info.Model, info.ContextLength
	r.add("server", OK, cfg.URL+" answers /v1/models", "")
	r.add("model", OK, r.Model, servedAlso(r.Models))
	switch {
	case r.ContextLength <= 0:
		r.add("context length", Fail, "unknown", "the engine reports no max_model_len (TensorRT-LLM and llama-server do not): give --max-model-len")
	case cfg.ContextLength > 0:
		r.add("context length", OK, fmt.Sprint(r.ContextLength), "from --max-model-len")
	default:
		r.add("context length", OK, fmt.Sprint(r.ContextLength), "the engine's max_model_len")
	}
	checkTokenMode(ctx, cfg, e, r)
	checkPrefill(ctx, cfg, e, r)
	checkHealth(ctx, cfg, e, r)
	checkMetrics(ctx, cfg, e, r)
	if cfg.KVEvents.Endpoint == "" {
		r.add("kv events", Skip, "no --kv-events-endpoint", "routing sees this engine's load, not its prefix cache")
	} else {
		checkEvents(ctx, cfg, e, r)
	}
	return r, nil
}

func servedAlso(ids []string) string {
	if len(ids) <= 1 {
		return ""
	}
	return fmt.Sprintf("of %v; --model picks another", ids)
}

func checkTokenMode(ctx context.Context, cfg Config, e *openaihttp.Engine, r *Report) {
	tctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	m, err := e.ProbeTokenMode(tctx)
	r.TokenMode = string(m)
	switch {
	case err != nil:
		r.add("token ids", Fail, err.Error(), "a one-token completion failed: the worker would fail the same way at start")
	case m == openaihttp.TokenIDs:
		r.add("token ids", OK, string(m), "choices[].token_ids")
	case m == openaihttp.LogprobTokens:
		r.add("token ids", OK, string(m), "logprobs tokens as token_id:N (vLLM before 0.10.2)")
	default:
		r.add("token ids", Warn, string(m), "the engine returns only text: clients get it as sent, one token per chunk; "+
			"token ids and logprobs' alternatives are best guesses")
	}
}

// checkPrefill runs one prefill leg of the engine's own disaggregation, as a
// prefill worker would, and looks for the decode leg's parameters in its answer.
func checkPrefill(ctx context.Context, cfg Config, e *openaihttp.Engine, r *Report) {
	d := cfg.Dialect.Disagg
	switch {
	case d == nil:
		r.add("prefill leg", Skip, "tandem drives no disaggregation of "+cfg.Dialect.Name, "")
		return
	case cfg.Dialect.Name == "sglang":
		// SGLang's parameters are tandem's own (bootstrap host, port, room), and its
		// prefill leg waits for a decode server to join the room: nothing to probe
		// without one.
		r.add("prefill leg", Skip, "SGLang's bootstrap parameters are the prefill worker's own",
			"its prefill leg waits for a decode server, so none is run here")
		return
	}
	miss := Warn
	if cfg.Prefill {
		miss = Fail
	}
	req := engine.Request{ID: "tandem-probe-prefill-leg", Prompt: probePrompt(e, cfg.BlockSize), MaxTokens: 1}
	pctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	x, err := d.Prefill(pctx, e, req, e.Body(req, false))
	if err != nil {
		what := "a prefill worker on this engine falls back to local prefill on every request"
		if errors.Is(err, engine.ErrNoTransferParams) {
			what += " (vLLM: start it with a kv_connector in --kv-transfer-config; TensorRT-LLM: a cache_transceiver_config)"
		}
		r.add("prefill leg", miss, err.Error(), what)
		return
	}
	defer x.Release()
	_ = x.Wait(pctx)
	r.TransferParams = x.Params()
	r.add("prefill leg", OK, "transfer parameters "+string(r.TransferParams), "")
}

func checkHealth(ctx context.Context, cfg Config, e *openaihttp.Engine, r *Report) {
	path := cfg.Dialect.HealthPath
	if path == "" {
		r.add("health", Skip, "the dialect names no health endpoint", "the worker probes /v1/models instead")
		return
	}
	hctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	_, err := e.Fetch(hctx, path)
	if err != nil {
		r.Health = err.Error()
		r.add("health", Fail, path+": "+err.Error(), "the worker probes it, and would take the engine for down and not serve")
		return
	}
	r.Health = "ok"
	r.add("health", OK, path+" answers 2xx", "")
}

// checkMetrics reads the engine's metrics once and names, for each load figure
// the dialect reads, the series found or those missing.
func checkMetrics(ctx context.Context, cfg Config, e *openaihttp.Engine, r *Report) {
	path := cfg.Dialect.MetricsPath
	mctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	b, err := e.Fetch(mctx, path)
	var samples []openaihttp.Sample
	if err == nil {
		samples, err = openaihttp.ParseMetrics(b)
	}
	if err != nil {
		r.add("metrics", Warn, path+": "+err.Error(), "load reports stay at zero: routing cannot see this engine's load")
		return
	}
	r.add("metrics", OK, path+fmt.Sprintf(" (%d series)", len(samples)), "")
	l := cfg.Dialect.Load
	for _, f := range []struct {
		name  string
		names []string
		miss  string
	}{
		{"running", l.Running, "running requests read as 0"},
		{"waiting", l.Waiting, "waiting requests read as 0"},
		{"kv usage", l.KVUsage, "the KV pool reads as empty"},
		{"kv blocks", l.TotalBlocks, "give --kv-blocks, else the pool is taken as " + fmt.Sprint(openaihttp.DefaultTotalBlocks) + " blocks"},
		{"prefix queries", l.PrefixQueries, "no prefix cache hit rate"},
		{"prefix hits", l.PrefixHits, "no prefix cache hit rate"},
	} {
		if len(f.names) == 0 {
			continue // the dialect reads none for this figure
		}
		found := ""
		for _, n := range f.names {
			if slices.ContainsFunc(samples, func(s openaihttp.Sample) bool { return s.Name == n }) {
				found = n
				break
			}
		}
		r.Metrics[f.name] = found
		if found == "" {
			r.add("metric "+f.name, Warn, "missing: "+strings.Join(f.names, ", "), f.miss)
		} else {
			r.add("metric "+f.name, OK, found, "")
		}
	}
	checkMetricsBlockSize(cfg, samples, r)
}

// checkMetricsBlockSize compares the block size an info series carries (vLLM's
// vllm:cache_config_info{block_size}) with the configured one.
func checkMetricsBlockSize(cfg Config, samples []openaihttp.Sample, r *Report) {
	for _, s := range samples {
		if !slices.Contains(cfg.Dialect.Load.TotalBlocks, s.Name) {
			continue
		}
		v, ok := s.Labels["block_size"]
		if !ok {
			continue
		}
		if v != fmt.Sprint(cfg.BlockSize) {
			r.add("metrics block size", Fail, fmt.Sprintf("%s says %s, --block-size is %d", s.Name, v, cfg.BlockSize),
				"tandem's block hashes would not match the engine's blocks: set --block-size to the engine's")
		} else {
			r.add("metrics block size", OK, fmt.Sprintf("%s (%s)", v, s.Name), "")
		}
		return
	}
}

// probePrompt is a prompt of two blocks of random tokens: long enough to store
// blocks (and so publish events), and not in the engine's prefix cache from a
// previous check. Without a tokenizer the ids stay below 256, inside every
// vocabulary: an id beyond the model's breaks some servers (llama-server).
func probePrompt(e *openaihttp.Engine, blockSize int) []uint32 {
	hi := uint32(256)
	if v := e.Info().VocabSize; v > 0 && v < noVocab {
		hi = uint32(min(v, 1000))
	}
	lo := hi / 10
	p := make([]uint32, 2*blockSize)
	for i := range p {
		p[i] = lo + rand.Uint32N(hi-lo)
	}
	return p
}
