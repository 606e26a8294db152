package openaihttp

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// HealthConfig is how an engine server is probed while it serves.
type HealthConfig struct {
	// Interval between probes; 0 means DefaultHealth's.
	Interval time.Duration
	// Timeout bounds one probe; 0 means the interval, at most 2 s.
	Timeout time.Duration
	// Failures is how many probes in a row must fail before the engine counts as
	// down: one lost probe on a busy engine is not an outage. 0 means DefaultHealth's.
	Failures int
}

// DefaultHealth notices a dead engine within about three seconds.
var DefaultHealth = HealthConfig{Interval: time.Second, Failures: 3}

func (c HealthConfig) orDefaults() HealthConfig {
	if c.Interval <= 0 {
		c.Interval = DefaultHealth.Interval
	}
	if c.Failures <= 0 {
		c.Failures = DefaultHealth.Failures
	}
	if c.Timeout <= 0 {
		c.Timeout = min(c.Interval, 2*time.Second)
	}
	return c
}

// prober probes the engine's health endpoint and tells subscribers when the
// engine goes down or comes back.
type prober struct {
	e     *Engine
	cfg   HealthConfig
	kick  chan struct{}
	stopc chan struct{}
	done  chan struct{}

	mu     sync.Mutex
	ok     bool
	reason string
	fails  int
	subs   []func(ok bool, reason string)
}

func newProber(e *Engine, cfg HealthConfig) *prober {
	return &prober{e: e, cfg: cfg.orDefaults(), ok: true, kick: make(chan struct{}, 1), stopc: make(chan struct{}), done: make(chan struct{})}
}

func (p *prober) run() {
	defer close(p.done)
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-p.stopc:
			return
		case <-t.C:
		case <-p.kick:
		}
		p.observe(p.probe())
	}
}

// probe asks the engine once whether it serves.
func (p *prober) probe() error {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.Timeout)
	defer cancel()
	path := p.e.d.HealthPath
	if path == "" {
		path = "/v1/models"
	}
	if _, err := p.e.c.get(ctx, path); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

// observe counts one probe's result and reports a change of state.
func (p *prober) observe(err error) {
	p.mu.Lock()
	was := p.ok
	if err == nil {
		p.fails, p.ok, p.reason = 0, true, ""
	} else {
		p.fails++
		if p.fails >= p.cfg.Failures {
			p.ok = false
			p.reason = fmt.Sprintf("%s does not answer its health check (%d probes in a row failed): %v", p.e.where(), p.fails, err)
		}
	}
	ok, reason, subs := p.ok, p.reason, p.subs
	p.mu.Unlock()
	if ok == was {
		return
	}
	if ok {
		p.e.log.Info("engine serves again")
	} else {
		// What the engine held is gone or unreachable: routing must not count on it.
		p.e.cache.Reset()
		p.e.log.Warn("engine down: the worker stops serving until it answers again", "reason", reason)
	}
	for _, f := range subs {
		f(ok, reason)
	}
}

// state is the engine's health as last probed.
func (p *prober) state() (bool, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ok, p.reason
}

// subscribe calls f on every change, and once now with the current state.
func (p *prober) subscribe(f func(ok bool, reason string)) {
	p.mu.Lock()
	p.subs = append(p.subs, f)
	ok, reason := p.ok, p.reason
	p.mu.Unlock()
	f(ok, reason)
}

// poke asks for a probe now: a request just failed to reach the engine.
func (p *prober) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *prober) stop() {
	close(p.stopc)
	<-p.done
}

// Healthy reports whether the engine answered its health checks lately, and
// why not when it did not.
func (e *Engine) Healthy() (bool, string) { return e.health.state() }

// OnHealthChange calls f when the engine goes down or comes back, and once at
// once with its state now.
func (e *Engine) OnHealthChange(f func(ok bool, reason string)) { e.health.subscribe(f) }
