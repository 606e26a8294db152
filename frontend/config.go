package frontend

import (
	"errors"
	"fmt"
	"time"
)

// Config is the frontend's configuration. services/ fills it from flags and the
// environment; this package only checks it.
type Config struct {
	// Model is the one model id served; requests naming another get 404.
	Model string
	// ContextLength is the model's context in tokens: prompt plus output.
	ContextLength int
	// MaxBodyBytes bounds an HTTP request body; a larger one gets 413.
	MaxBodyBytes int64
	// DefaultMaxTokens is the output budget when a request sets none. It is always
	// capped by what the context leaves after the prompt.
	DefaultMaxTokens int
	// DefaultTemperature applies when a request sets none. OpenAI's default is 1.
	DefaultTemperature float32
	// ChatTemplate names the chat template; "" means "chatml".
	ChatTemplate string
	// MaxInFlight bounds the requests generating at once (0: no bound); up to
	// MaxQueue more wait at most QueueTimeout for a slot. Past the queue a request
	// gets 429, past the timeout 503, both with Retry-After.
	MaxInFlight  int
	MaxQueue     int
	QueueTimeout time.Duration
	// APIKeys, when not empty, are the bearer tokens accepted; every endpoint but
	// /healthz then answers 401 without one.
	APIKeys []string
}

// DefaultConfig returns the defaults services/ starts from.
func DefaultConfig() Config {
	return Config{
		Model:              "tandem-tiny",
		ContextLength:      4096,
		MaxBodyBytes:       4 << 20,
		DefaultMaxTokens:   256,
		DefaultTemperature: 1.0,
		ChatTemplate:       "chatml",
		MaxInFlight:        256,
		MaxQueue:           1024,
		QueueTimeout:       30 * time.Second,
	}
}

// Validate reports every problem in c at once.
func (c Config) Validate() error {
	var errs []error
	if c.Model == "" {
		errs = append(errs, errors.New("frontend: model must not be empty"))
	}
	if c.ContextLength < 2 {
		errs = append(errs, fmt.Errorf("frontend: context length %d must be at least 2 (one prompt token, one output token)", c.ContextLength))
	}
	if c.MaxBodyBytes < 1024 {
		errs = append(errs, fmt.Errorf("frontend: max body bytes %d must be at least 1024", c.MaxBodyBytes))
	}
	if c.DefaultMaxTokens < 1 {
		errs = append(errs, fmt.Errorf("frontend: default max tokens %d must be at least 1", c.DefaultMaxTokens))
	}
	if !(c.DefaultTemperature >= 0 && c.DefaultTemperature <= 2) {
		errs = append(errs, fmt.Errorf("frontend: default temperature %v must be in [0, 2]", c.DefaultTemperature))
	}
	if c.MaxInFlight < 0 || c.MaxQueue < 0 || (c.MaxInFlight > 0 && c.QueueTimeout <= 0) {
		errs = append(errs, fmt.Errorf("frontend: max in flight %d and max queue %d must not be negative, and the queue timeout %s must be positive when bounded", c.MaxInFlight, c.MaxQueue, c.QueueTimeout))
	}
	if _, err := templateByName(c.ChatTemplate); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
