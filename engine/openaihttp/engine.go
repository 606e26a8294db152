// Package openaihttp drives a GPU engine server (vLLM, TensorRT-LLM, SGLang)
// over its OpenAI-compatible HTTP API, as a tandem engine.Engine: a decode or
// aggregated worker generates through it, a prefill worker runs the prefill leg
// of the engine's own disaggregation (engine.RefExporter), and a decode worker
// passes that leg's transfer parameters to its engine (engine.RefImporter).
//
// tandem sends token ids (the prompt as a list of ids), so the engine's prefix
// cache sees the tokens tandem's block hashes were computed over, and reads token
// ids back in one of three ways (TokenMode). Load comes from the engine's
// Prometheus metrics; the prefix cache, when the engine publishes KV events, from
// a kvevents.Mirror. What differs between engines is a Dialect; the packages
// engine/vllm, engine/trtllm and engine/sglang provide theirs.
package openaihttp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/kvevents"
	"github.com/tandem-serve/tandem/kvcache"
	"github.com/tandem-serve/tandem/tokenizer"
)

// Dialect is what one engine's HTTP API does its own way.
type Dialect struct {
	// Name is the engine's, as Info reports it: "vllm", "trtllm", "sglang".
	Name string
	// MetricsPath serves the Prometheus text format.
	MetricsPath string
	// HealthPath answers 200 while the engine can serve (vLLM's, SGLang's and
	// trtllm-serve's /health); "" probes /v1/models instead.
	HealthPath string
	Load       LoadMetrics
	// AskTokenIDs sets the fields that make the engine return each chunk's token
	// ids in choices[].token_ids.
	AskTokenIDs func(*CompletionRequest)
	// LogprobTokenIDs: with logprobs, the engine can name tokens "token_id:N"
	// (vLLM's return_tokens_as_token_ids).
	LogprobTokenIDs bool
	// Disagg is the engine's own KV transfer; nil when tandem drives none.
	Disagg Disagg
	// Constrain puts a request's constraint (structured outputs, enforced tool
	// calls) in the engine's own field.
	Constrain func(*CompletionRequest, *engine.Constraint)
	// PromptLogprobs: the engine reports the prompt's logprobs in a
	// non-streamed answer's choices[].prompt_logprobs (vLLM); without it a
	// request for them is refused.
	PromptLogprobs bool
}

// Config is how to reach and read one engine server.
type Config struct {
	URL     string // http://host:port
	Dialect Dialect
	// Tokenizer is the model's: its vocabulary bounds token ids, and text mode
	// guesses the ids of the engine's text with it.
	Tokenizer tokenizer.Tokenizer
	// Model is the served model id to request; "" takes the engine's first.
	Model string
	// ContextLength caps the context; 0 takes the engine's max_model_len.
	ContextLength int
	BlockSize     int
	// TotalBlocks is the engine's KV pool in blocks, for load reports; 0 takes it
	// from the engine's metrics when they say, else DefaultTotalBlocks.
	TotalBlocks int
	TokenMode   TokenMode
	// MetricsInterval is how often load is scraped.
	MetricsInterval time.Duration
	// Wait is how long New waits for the engine to answer (it may be loading).
	Wait time.Duration
	// Waiting, if set, hears why each attempt to reach a starting engine failed.
	Waiting func(error)
	// Timeouts bound every wait on the engine; zero fields take DefaultTimeouts'.
	Timeouts Timeouts
	// Health is how the engine is probed while it serves.
	Health HealthConfig
	// Cache is the engine's prefix cache as its events tell it; nil: the engine
	// reports no events, and routing sees only its load.
	Cache  *kvevents.Mirror
	HTTP   *http.Client
	Logger *slog.Logger
}

// DefaultTotalBlocks stands for a KV pool whose size the engine does not report.
const DefaultTotalBlocks = 16384

// Engine is one engine server.
type Engine struct {
	cfg    Config
	d      Dialect
	c      *client
	model  string
	ctxLen int
	mode   TokenMode
	cache  *kvevents.Mirror
	events bool
	log    *slog.Logger
	load   *scraper
	// timeouts are Config.Timeouts with the defaults filled in.
	timeouts Timeouts
	health   *prober
	failures failures
	pieces   pieceIDs // text mode's tokens by their text

	mu     sync.Mutex
	closed bool
}

var (
	_ engine.Engine      = (*Engine)(nil)
	_ engine.RefExporter = (*Engine)(nil)
	_ engine.RefImporter = (*Engine)(nil)
)

// ErrNoContextLength is New's error when the engine does not report the model's
// context length (TRT-LLM does not) and Config.ContextLength is 0.
var ErrNoContextLength = errors.New("the engine does not report max_model_len and no context length is configured")

// New waits for the engine to serve its models, learns the served model id and
// context length, settles how token ids come back, and starts scraping load.
func New(ctx context.Context, cfg Config) (*Engine, error) {
	if cfg.Tokenizer == nil {
		return nil, errors.New("openaihttp: Config.Tokenizer is required")
	}
	if cfg.BlockSize <= 0 {
		return nil, errors.New("openaihttp: block size must be positive")
	}
	if cfg.HTTP == nil {
		cfg.HTTP = DefaultHTTPClient()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MetricsInterval <= 0 {
		cfg.MetricsInterval = time.Second
	}
	e := &Engine{cfg: cfg, d: cfg.Dialect, c: &client{base: strings.TrimRight(cfg.URL, "/"), http: cfg.HTTP},
		cache: cfg.Cache, events: cfg.Cache != nil, log: cfg.Logger.With("engine", cfg.Dialect.Name, "engine_url", cfg.URL),
		timeouts: cfg.Timeouts.orDefaults()}
	e.health = newProber(e, cfg.Health)
	if e.cache == nil {
		e.cache = kvevents.NewMirror(cfg.BlockSize, 1)
	}
	m, err := e.waitModels(ctx)
	if err != nil {
		return nil, err
	}
	e.model, e.ctxLen = m.ID, cfg.ContextLength
	if e.ctxLen <= 0 {
		e.ctxLen = m.MaxModelLen
	}
	if e.ctxLen <= 0 {
		return nil, fmt.Errorf("%s at %s, model %q: %w", e.d.Name, cfg.URL, m.ID, ErrNoContextLength)
	}
	if e.mode, err = e.settleTokenMode(ctx, cfg.TokenMode); err != nil {
		return nil, err
	}
	e.load = newScraper(e.c, e.d, cfg.BlockSize, cfg.TotalBlocks, e.log)
	go e.load.run(cfg.MetricsInterval)
	go e.health.run()
	e.log.Info("engine ready", "model", e.model, "max_model_len", e.ctxLen, "token_mode", string(e.mode),
		"kv_events", e.events, "disaggregation", e.d.Disagg != nil)
	return e, nil
}

// waitModels polls /v1/models until the engine answers with the model to serve.
func (e *Engine) waitModels(ctx context.Context) (Model, error) {
	deadline := time.Now().Add(e.cfg.Wait)
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := e.c.models(cctx)
		cancel()
		if err == nil {
			for _, m := range l.Data {
				if e.cfg.Model == "" || m.ID == e.cfg.Model {
					return m, nil
				}
			}
			var ids []string
			for _, m := range l.Data {
				ids = append(ids, m.ID)
			}
			if len(ids) == 0 {
				err = errors.New("it serves no model")
			} else {
				return Model{}, fmt.Errorf("%s at %s serves %v, not %q", e.d.Name, e.cfg.URL, ids, e.cfg.Model)
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return Model{}, fmt.Errorf("%s at %s: /v1/models: %w", e.d.Name, e.cfg.URL, err)
		}
		if e.cfg.Waiting != nil {
			e.cfg.Waiting(err)
		}
		if attempt%10 == 0 {
			e.log.Info("waiting for the engine to serve", "error", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// Info describes the served model. The layout has no tensor shape: the engine
// moves its KV itself, and only engines of the same kind serving the same model
// (the fingerprint) may hand it to each other.
func (e *Engine) Info() engine.Info {
	total := e.load.total()
	return engine.Info{
		Engine: e.d.Name, Model: e.model, VocabSize: e.cfg.Tokenizer.VocabSize(), ContextLength: e.ctxLen, TotalBlocks: total,
		Layout: engine.Layout{BlockSize: e.cfg.BlockSize, Fingerprint: e.d.Name + "/" + e.model},
	}
}

// TokenMode is how this engine's token ids come back.
func (e *Engine) TokenMode() TokenMode { return e.mode }

// ReportsKVEvents says whether the engine's prefix cache is known from its
// events; without them routing sees only load.
func (e *Engine) ReportsKVEvents() bool { return e.events }

// CachedPrefix is the prompt's leading tokens in the engine's prefix cache, as
// its events said; 0 without events.
func (e *Engine) CachedPrefix(prompt []uint32) int { return e.cache.CachedPrefix(prompt) }

// Events is the log of the engine's cache changes under tandem's hashes.
func (e *Engine) Events() *kvcache.EventLog { return e.cache.Events() }

// Snapshot is the engine's prefix cache as its events said.
func (e *Engine) Snapshot() kvcache.Snapshot { return e.cache.Snapshot() }

// Stats is the load the engine last reported.
func (e *Engine) Stats() engine.Stats { return e.load.stats() }

// Close stops scraping. Running streams end when their requests do.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.closed {
		e.closed = true
		e.load.stop()
		e.health.stop()
	}
	return nil
}

// Prefill exports KV blocks, which an engine server cannot: its prefill hands
// the KV over by reference (ExportRef).
func (e *Engine) Prefill(context.Context, engine.Request) (engine.Export, error) {
	return nil, fmt.Errorf("%w: %s moves KV itself; it exports no blocks", engine.ErrNoExport, e.d.Name)
}

// Import takes KV blocks, which an engine server cannot (ImportRef instead).
func (e *Engine) Import(context.Context, engine.Request, engine.ImportSpec) (engine.Importer, error) {
	return nil, fmt.Errorf("%w: %s moves KV itself; it imports no blocks", engine.ErrNoExport, e.d.Name)
}

// Generate prefills and decodes on the engine, streaming.
func (e *Engine) Generate(ctx context.Context, req engine.Request) (engine.Stream, error) {
	if req.PromptLogprobs {
		return e.generateWhole(ctx, req)
	}
	return e.Start(ctx, req, e.Body(req, true))
}

// Body is req as a completions request in this engine's dialect, streamed or not,
// asking for token ids as the token mode needs.
func (e *Engine) Body(req engine.Request, stream bool) CompletionRequest {
	maxTokens := req.MaxTokens
	if left := e.ctxLen - len(req.Prompt); maxTokens <= 0 || maxTokens > left {
		maxTokens = max(left, 1)
	}
	seed := int64(req.Sampling.Seed & (1<<63 - 1))
	b := CompletionRequest{
		Model: e.model, Prompt: req.Prompt, MaxTokens: maxTokens, Temperature: req.Sampling.Temperature, Seed: &seed,
		Stream: stream, StopTokenIDs: req.StopTokens, IgnoreEOS: !slices.Contains(req.StopTokens, e.cfg.Tokenizer.EOS()),
	}
	if stream {
		b.StreamOptions = &StreamOptions{IncludeUsage: true}
	}
	if tp := req.Sampling.TopP; tp > 0 && tp < 1 {
		b.TopP = &tp
	}
	if k := req.Sampling.TopK; k > 0 {
		b.TopK = &k
	}
	setControls(&b, req.Sampling)
	if c := req.Sampling.Constraint; c != nil && e.d.Constrain != nil {
		e.d.Constrain(&b, c)
	}
	yes := true
	switch e.mode {
	case TokenIDs:
		e.d.AskTokenIDs(&b)
	case LogprobTokens:
		zero := 0
		b.Logprobs, b.ReturnTokensAsTokenIDs = &zero, &yes
	}
	if req.Logprobs {
		n := min(req.TopLogprobs, engine.MaxTopLogprobs)
		b.Logprobs = &n
		if e.d.LogprobTokenIDs {
			b.ReturnTokensAsTokenIDs = &yes
		}
	}
	return b
}

// Start posts body and streams its tokens. Cancelling ctx, or closing the
// stream, cancels the engine's HTTP request, which aborts it there. Each wait on
// the engine is bounded (Config.Timeouts): a silent engine ends the request with a
// StallError.
func (e *Engine) Start(ctx context.Context, req engine.Request, body CompletionRequest) (engine.Stream, error) {
	rctx, cancel := context.WithCancelCause(ctx)
	dog := newWatchdog(cancel, e.where(), e.timeouts)
	dog.arm("response headers", boundHeader)
	resp, err := e.c.post(rctx, "/v1/completions", req.ID, &body)
	if err == nil && !isEventStream(resp.Header.Get("Content-Type")) {
		err = notAStream(resp)
	}
	if err != nil {
		dog.stop()
		stall := stallOf(rctx)
		cancel(nil)
		if stall != nil {
			return nil, e.count(stall)
		}
		return nil, e.count(e.wrap(ctx, err))
	}
	dog.arm("first token", boundFirstToken)
	return newStream(e, req, rctx, cancel, dog, resp.Body), nil
}

// Complete posts body without streaming and returns the engine's answer, within
// the first-token bound (a prefill leg is one token).
func (e *Engine) Complete(ctx context.Context, reqID string, body CompletionRequest) (*CompletionResponse, error) {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	dog := newWatchdog(cancel, e.where(), e.timeouts)
	dog.arm("answer", boundFirstToken)
	defer dog.stop()
	resp, err := e.c.complete(rctx, reqID, &body)
	if err != nil {
		if stall := stallOf(rctx); stall != nil {
			return nil, e.count(stall)
		}
		return nil, e.count(e.wrap(ctx, err))
	}
	return resp, nil
}

// where names the engine server in errors and logs.
func (e *Engine) where() string { return e.d.Name + " at " + e.cfg.URL }

// stallOf is the StallError that cancelled ctx, if one did.
func stallOf(ctx context.Context) *StallError {
	var se *StallError
	if errors.As(context.Cause(ctx), &se) {
		return se
	}
	return nil
}

// wrap names an HTTP failure with the engine error its status means.
func (e *Engine) wrap(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var pe *ProtocolError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", e.where(), err)
	}
	var se *StatusError
	switch {
	case errors.As(err, &se) && (se.Status == http.StatusServiceUnavailable || se.Status == http.StatusTooManyRequests):
		return fmt.Errorf("%w: %s: %v", engine.ErrUnavailable, e.where(), err)
	case errors.As(err, &se) && se.Status/100 == 4:
		return fmt.Errorf("%w: %s: %v", engine.ErrRejected, e.where(), err)
	case errors.As(err, &se):
		return fmt.Errorf("%s: %w", e.where(), err)
	}
	e.health.poke() // the engine may be gone: find out now rather than at the next probe
	return fmt.Errorf("%w: %s: %v", engine.ErrUnavailable, e.where(), err)
}

// DefaultHTTPClient is the client New uses when Config.HTTP is nil, for a caller
// that wraps its transport (to trace it). It has no overall timeout: a stream
// lasts as long as its request; each call has its context.
func DefaultHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second,
		ResponseHeaderTimeout: 10 * time.Minute}}
}
