// Package console is tandem's live console, served by the frontend: a page that
// chats with the model and shows, as they happen, each request's prefill decision,
// the fleet of workers with their KV caches, latency percentiles and the policy in
// force, which it can change where the deployment keeps policy in Consul.
//
// Its live data is one server-sent-events endpoint, GET /console/events
// (docs/CONSOLE.md), fed by the router's fleet stream (FollowFleet) and the
// frontend's own record of each request (Record); every browser is a subscriber
// of it, and nothing polls the workers. The page is plain JavaScript and CSS,
// embedded in the binary.
//
// The package opens no listeners and knows no Consul: services/ mounts Handler and
// gives it a PolicyStore.
package console

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/tandem-serve/tandem/frontend"
)

// PolicyStore changes the runtime policy of a deployment (Consul KV); the router
// and decode workers watch it and apply what passes their checks.
type PolicyStore interface {
	// Check says what is wrong with value as the policy of target ("router",
	// "decode" or "planner"), exactly as the services that watch it would.
	Check(target string, value []byte) error
	// Set writes it.
	Set(ctx context.Context, target string, value []byte) error
}

// Options are what the console needs from the process serving it.
type Options struct {
	// Model names the model served now; "" before it is known.
	Model func() string
	// Policy changes the runtime policy; nil when the deployment has none to
	// change (no Consul), and the page shows the policy read-only.
	Policy PolicyStore
	// Guard wraps the console's data (the events and the policy), e.g. to require
	// an API key; nil leaves them open. The page itself holds no data and is open.
	Guard   func(http.Handler) http.Handler
	Version string
	Log     *slog.Logger
}

// Console gathers what the page shows and serves it.
type Console struct {
	opts Options
	log  *slog.Logger

	mu     sync.Mutex
	closed bool
	subs   map[*subscriber]struct{}
	hello  Hello
	fleet  Fleet
	stats  stats
}

// New returns a console; Run makes its ticks and FollowFleet feeds its fleet.
func New(opts Options) *Console {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Model == nil {
		opts.Model = func() string { return "" }
	}
	if opts.Guard == nil {
		opts.Guard = func(h http.Handler) http.Handler { return h }
	}
	return &Console{
		opts: opts, log: opts.Log, subs: map[*subscriber]struct{}{},
		hello: Hello{Version: opts.Version, PolicyWritable: opts.Policy != nil, WindowSeconds: windowSeconds, HistorySeconds: historySeconds},
		fleet: Fleet{Workers: []Worker{}},
	}
}

// Record takes one request's outcome (frontend.OnOutcome) and tells it to every
// page at once.
func (c *Console) Record(o frontend.Outcome) {
	r := Request{
		Time: o.End.UnixMilli(), ID: o.RequestID, Endpoint: o.Endpoint,
		Path: o.Path, Reason: o.Reason, Detail: o.Detail, Policy: o.Policy,
		Decode: o.DecodeWorker, Prefill: o.PrefillWorker, RouteWhy: o.RouteReason,
		Prompt: o.PromptTokens, Effective: o.EffectiveTokens, Cached: o.CachedTokens, DecodeCached: o.DecodeCachedTokens,
		Completion: o.CompletionTokens, Finish: o.Finish,
		TTFTMs: ms(o.TTFT), ITLMs: ms(o.ITL), DurationMs: ms(o.End.Sub(o.Start)),
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r.RouteCached = o.RouteCachedBlocks * c.fleet.BlockSize
	c.stats.add(r)
	c.publish(frame("request", r))
}

func ms(d time.Duration) float64 { return round3(float64(d) / float64(time.Millisecond)) }

// Run closes a tick every second until ctx ends, then disconnects every page.
func (c *Console) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	defer c.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			c.tick(now)
		}
	}
}

// tick closes the current second at now and tells every page.
func (c *Console) tick(now time.Time) {
	model := c.opts.Model()
	c.mu.Lock()
	defer c.mu.Unlock()
	var threshold uint32
	if r := c.fleet.Router; r != nil && r.ISLGate {
		threshold = r.ISLThresholdInForce
	}
	c.publish(frame("tick", c.stats.close(now, model, threshold)))
}
