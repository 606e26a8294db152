package openaihttp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/tandem-serve/tandem/engine/kvevents"
)

// Inspect reaches the engine server once, as New does, but without waiting for
// it, settling a token mode or scraping its load: what `tandem engine check`
// probes. It returns the engine with its model chosen (cfg.Model, else the
// first served) and what /v1/models listed. The context length is
// cfg.ContextLength, else the model's max_model_len, else 0: unknown, which New
// refuses and a check reports. The engine's token mode is text until
// ProbeTokenMode settles it; Close is not needed.
func Inspect(ctx context.Context, cfg Config) (*Engine, []Model, error) {
	if cfg.Tokenizer == nil {
		return nil, nil, errors.New("openaihttp: Config.Tokenizer is required")
	}
	if cfg.BlockSize <= 0 {
		return nil, nil, errors.New("openaihttp: block size must be positive")
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: time.Minute}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Engine{cfg: cfg, d: cfg.Dialect, c: &client{base: strings.TrimRight(cfg.URL, "/"), http: cfg.HTTP},
		cache: kvevents.NewMirror(cfg.BlockSize, 1), mode: TextTokens, log: cfg.Logger.With("engine", cfg.Dialect.Name, "engine_url", cfg.URL),
		timeouts: cfg.Timeouts.orDefaults()}
	e.health = newProber(e, cfg.Health) // never run: a check probes health itself
	e.load = newScraper(e.c, e.d, cfg.BlockSize, cfg.TotalBlocks, e.log)
	l, err := e.c.models(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("%s at %s: /v1/models: %w", e.d.Name, cfg.URL, err)
	}
	var ids []string
	for _, m := range l.Data {
		ids = append(ids, m.ID)
		if e.model == "" && (cfg.Model == "" || m.ID == cfg.Model) {
			e.model, e.ctxLen = m.ID, m.MaxModelLen
		}
	}
	switch {
	case len(ids) == 0:
		return nil, l.Data, fmt.Errorf("%s at %s serves no model", e.d.Name, cfg.URL)
	case e.model == "":
		return nil, l.Data, fmt.Errorf("%s at %s serves %v, not %q", e.d.Name, cfg.URL, ids, cfg.Model)
	}
	if cfg.ContextLength > 0 {
		e.ctxLen = cfg.ContextLength
	}
	return e, l.Data, nil
}

// ProbeTokenMode asks the engine how its token ids come back, with the one-token
// probes New makes under TokenAuto, and keeps the answer as the engine's mode.
func (e *Engine) ProbeTokenMode(ctx context.Context) (TokenMode, error) {
	m, err := e.settleTokenMode(ctx, TokenAuto)
	if err != nil {
		return "", err
	}
	e.mode = m
	return m, nil
}

// Fetch GETs path from the engine server (its health, its metrics); a non-2xx
// answer is a *StatusError.
func (e *Engine) Fetch(ctx context.Context, path string) ([]byte, error) { return e.c.get(ctx, path) }

// Dialect is the engine's.
func (e *Engine) Dialect() Dialect { return e.d }
