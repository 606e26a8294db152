package frontend

import (
	"errors"
	"fmt"
	"time"

	"github.com/tandem-serve/tandem/toolcall"
)

// Config is the frontend's configuration. services/ fills it from flags and the
// environment; this package only checks it.
type Config struct {
	// MaxBodyBytes bounds an HTTP request body; a larger one gets 413.
	MaxBodyBytes int64
	// BodyReadTimeout bounds the time to read a request body, plus the body's
	// length at BodyMinRate bytes per second, so that a client trickling its body
	// cannot hold a connection; 0 turns the bound off. Past it: 408.
	BodyReadTimeout time.Duration
	BodyMinRate     int64
	// DefaultMaxTokens is the output budget when a request sets none. It is always
	// capped by what the context leaves after the prompt.
	DefaultMaxTokens int
	// DefaultTemperature applies when a request sets none. OpenAI's default is 1.
	DefaultTemperature float32
	// MaxInFlight bounds the requests generating at once (0: no bound); up to
	// MaxQueue more wait at most QueueTimeout for a slot. Past the queue a request
	// gets 429, past the timeout 503, both with Retry-After. It guards the
	// frontend process, not the workers: each decode worker admits what its
	// engine can take (--max-running-requests, KV usage, waiting tokens) and
	// refuses the rest, which the frontend then tries elsewhere. A bound here
	// near the workers' own (it was 256, for a whole fleet) queues requests
	// where no worker's admission or prefill decision can see them.
	MaxInFlight  int
	MaxQueue     int
	QueueTimeout time.Duration
	// APIKeys, when not empty, are the bearer tokens accepted; every endpoint but
	// /healthz and /readyz then answers 401 without one.
	APIKeys []string
	// ToolCallParser names the tool-call parser (toolcall.Names); empty picks it
	// from the model's chat template.
	ToolCallParser string
}

// DefaultConfig returns the defaults services/ starts from.
func DefaultConfig() Config {
	return Config{
		MaxBodyBytes:       4 << 20,
		BodyReadTimeout:    10 * time.Second,
		BodyMinRate:        64 << 10,
		DefaultMaxTokens:   256,
		DefaultTemperature: 1.0,
		MaxInFlight:        4096,
		MaxQueue:           1024,
		QueueTimeout:       30 * time.Second,
	}
}

// Validate reports every problem in c at once.
func (c Config) Validate() error {
	var errs []error
	if c.MaxBodyBytes < 1024 {
		errs = append(errs, fmt.Errorf("frontend: max body bytes %d must be at least 1024", c.MaxBodyBytes))
	}
	if c.BodyReadTimeout < 0 || c.BodyMinRate < 0 {
		errs = append(errs, fmt.Errorf("frontend: body read timeout %s and body min rate %d must not be negative", c.BodyReadTimeout, c.BodyMinRate))
	}
	if c.DefaultMaxTokens < 1 {
		errs = append(errs, fmt.Errorf("frontend: default max tokens %d must be at least 1", c.DefaultMaxTokens))
	}
	if !(c.DefaultTemperature >= 0 && c.DefaultTemperature <= 2) {
		errs = append(errs, fmt.Errorf("frontend: default temperature %v must be in [0, 2]", c.DefaultTemperature))
	}
	if c.MaxInFlight < 0 || c.MaxQueue < 0 || (c.MaxInFlight > 0 && c.QueueTimeout <= 0) {
		errs = append(errs,
			fmt.Errorf("frontend: max in flight %d and max queue %d must not be negative, and the queue timeout %s must be positive when bounded",
				c.MaxInFlight, c.MaxQueue, c.QueueTimeout))
	}
	if c.ToolCallParser != "" {
		if _, err := toolcall.ByName(c.ToolCallParser); err != nil {
			errs = append(errs, fmt.Errorf("frontend: tool call parser: %w", err))
		}
	}
	return errors.Join(errs...)
}
