// Package routersvc runs the router: discovery of the workers, their event streams
// feeding the router's state, and the RouterService.
package routersvc

import (
	"context"
	"errors"
	"flag"
	"math/rand/v2"

	"github.com/tandem-serve/tandem/proto/tandem/router/v1/routerv1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/router"
	"github.com/tandem-serve/tandem/services"
	"github.com/tandem-serve/tandem/services/discovery"
	"github.com/tandem-serve/tandem/services/process"
	"github.com/tandem-serve/tandem/services/server"
)

// Config is the router's flags.
type Config struct {
	Serve          process.Serve
	DecodeWorkers  services.List
	PrefillWorkers services.List
	BlockSize      int
}

// RegisterFlags registers the router's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Serve.RegisterFlags(fs, "127.0.0.1:0")
	fs.Var(&c.DecodeWorkers, "decode-workers", "comma-separated decode (or aggregated) worker addresses (static discovery)")
	fs.Var(&c.PrefillWorkers, "prefill-workers", "comma-separated prefill worker addresses (static discovery)")
	fs.IntVar(&c.BlockSize, "block-size", 16, "tokens per KV block; must match the workers'")
}

// Validate checks the flags.
func (c *Config) Validate() error {
	if len(c.DecodeWorkers) == 0 {
		return errors.New("--decode-workers: at least one address is needed")
	}
	if c.BlockSize <= 0 {
		return errors.New("--block-size must be positive")
	}
	return nil
}

// Service is a started router.
type Service struct {
	cfg     Config
	srv     *server.Server
	tracker *discovery.Tracker
}

// observer feeds worker load into the router.
type observer struct{ r *router.Router }

func (o observer) Update(w router.Worker, msg *workerv1.WatchEventsResponse) {
	if msg.GetLoad() != nil {
		o.r.ObserveLoad(w.ID, msg.GetLoad())
	}
}
func (o observer) Leave(w router.Worker) { o.r.Forget(w.ID) }

// Start opens the listener; the router reports SERVING once every configured
// worker has been reached.
func Start(env *process.Env, cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	obs := &observer{}
	tracker := discovery.NewTracker(env.Clients.Dial, obs, env.Logger)
	r := router.New(router.Config{BlockSize: cfg.BlockSize}, tracker, rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())), env.Registry)
	obs.r = r
	srv, err := env.NewServer(cfg.Serve, []server.Handler{
		server.Mount(routerv1connect.RouterServiceName)(routerv1connect.NewRouterServiceHandler(r, env.HandlerOptions()...)),
	}, nil)
	if err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, srv: srv, tracker: tracker}, nil
}

// Addr is where the router listens.
func (s *Service) Addr() string { return s.srv.Addr() }

// Run serves until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	s.tracker.Set(ctx, append(append([]string{}, s.cfg.DecodeWorkers...), s.cfg.PrefillWorkers...))
	go func() {
		select {
		case <-s.tracker.Ready():
			s.srv.SetServing(true)
		case <-ctx.Done():
		}
	}()
	return s.srv.Serve(ctx)
}
