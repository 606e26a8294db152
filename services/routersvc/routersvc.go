// Package routersvc runs the router: discovery of the workers, their event streams
// feeding the router's KV index and load, and the RouterService.
package routersvc

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/tandem-serve/tandem/internal/requestid"
	"github.com/tandem-serve/tandem/services/consul"

	"github.com/tandem-serve/tandem/kvcache/blockhash"
	"github.com/tandem-serve/tandem/proto/tandem/router/v1/routerv1connect"
	"github.com/tandem-serve/tandem/router"
	"github.com/tandem-serve/tandem/services"
	"github.com/tandem-serve/tandem/services/discovery"
	"github.com/tandem-serve/tandem/services/plannersvc"
	"github.com/tandem-serve/tandem/services/process"
	"github.com/tandem-serve/tandem/services/server"
)

// followEvery is how often a router applies the plan it follows again (after
// it dropped roles that left no worker to decode).
const followEvery = 5 * time.Second

// Config is the router's flags.
type Config struct {
	Serve          process.Serve
	DecodeWorkers  services.List
	PrefillWorkers services.List
	// BlockSize is assumed for a request that names none; the frontend sends the
	// model card's with each request, so it is no flag.
	BlockSize int
	Params    router.Params
	Consul    consul.Config
	Planner   plannersvc.Config
}

// RegisterFlags registers the router's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Serve.RegisterFlags(fs, "127.0.0.1:0")
	fs.Var(&c.DecodeWorkers, "decode-workers", "comma-separated decode (or aggregated) worker addresses (static discovery)")
	fs.Var(&c.PrefillWorkers, "prefill-workers", "comma-separated prefill worker addresses (static discovery)")
	c.Consul.RegisterFlags(fs)
	c.RegisterRoleFlags(fs)
}

// RegisterRoleFlags registers the routing parameters' flags, with their defaults:
// the ones tandem up takes too.
func (c *Config) RegisterRoleFlags(fs *flag.FlagSet) {
	c.Params = router.DefaultParams()
	p := &c.Params
	fs.Float64Var(&p.PrefillWeight, "prefill-weight", p.PrefillWeight, "cost of one uncached prompt block relative to one active decode block")
	fs.Float64Var(&p.QueueWeight, "queue-weight", p.QueueWeight, "weight of blocks queued for prefill on a worker (and routed there since its last report)")
	fs.Float64Var(&p.Temperature, "router-temperature", p.Temperature, "softmax temperature over normalised costs; 0 picks the cheapest worker, ties at random")
	fs.BoolVar(&p.ISLGate, "isl-gate", p.ISLGate,
		"gate candidates by worker mode: below --isl-threshold effective tokens score only workers that prefill locally, else only disaggregated decode workers")
	fs.IntVar(&p.ISLThreshold, "isl-threshold", p.ISLThreshold,
		"effective prompt tokens (prompt minus best cached prefix) at which gating switches to disaggregated workers")
	fs.BoolVar(&p.ISLAdaptive, "isl-adaptive", p.ISLAdaptive, "nudge --isl-threshold by comparing the two classes' best costs")
	fs.IntVar(&p.ISLMin, "isl-min", p.ISLMin, "lowest the adaptive threshold goes")
	fs.IntVar(&p.ISLMax, "isl-max", p.ISLMax, "highest the adaptive threshold goes")
	fs.IntVar(&p.ISLStep, "isl-step", p.ISLStep, "tokens one adaptive move changes the threshold by")
	fs.Float64Var(&p.ISLMargin, "isl-margin", p.ISLMargin, "cost difference between classes that counts as evidence for a move")
	fs.IntVar(&p.ISLHysteresis, "isl-hysteresis", p.ISLHysteresis, "consecutive agreeing requests needed before the threshold moves")
	fs.Float64Var(&p.ISLITLWeight, "isl-itl-weight", p.ISLITLWeight,
		"in the adaptive comparison, weight of the stall a local prefill inflicts on each sequence decoding on the local class's best worker (0 ignores them, 1 counts each as fully as the new request's wait)")
	c.Planner.RegisterFlags(fs)
	fs.BoolVar(&p.LendersPrefillFirst, "lenders-prefill-first", p.LendersPrefillFirst,
		"send decodes to a lender (an aggregated worker with --lend-prefill) only while it prefills nothing for decode workers; use with --isl-gate")
}

// Validate checks the flags.
func (c *Config) Validate() error {
	if len(c.DecodeWorkers) == 0 && !c.Consul.Enabled() {
		return errors.New("--decode-workers: at least one address is needed without --consul")
	}
	if err := c.Consul.ValidateServing(c.Serve.TLS.Enabled()); err != nil {
		return err
	}
	if c.BlockSize == 0 {
		c.BlockSize = blockhash.DefaultBlockSize
	}
	if c.BlockSize < 0 {
		return errors.New("block size must be positive")
	}
	if err := c.Planner.Validate(); err != nil {
		return err
	}
	return c.Params.Validate()
}

// Service is a started router.
type Service struct {
	cfg     Config
	srv     *server.Server
	tracker *discovery.Tracker
	member  *consul.Member
	log     *slog.Logger
	Router  *router.Router
	// Planner is the planner running beside the router (nil: off).
	Planner *plannersvc.Service
	// follower applies the plan another router's planner published (with
	// Consul, when this router runs none).
	follower *plannersvc.Follower

	mu sync.Mutex
	// configured is the routing parameters of the flags and tandem/config/router,
	// before a plan's gating.
	configured router.Params
}

// Start opens the listener; the router reports SERVING once every configured
// worker has been reached.
func Start(env *process.Env, cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r, err := router.New(router.Config{BlockSize: cfg.BlockSize, Params: cfg.Params, Logger: env.Logger}, rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())), env.Registry)
	if err != nil {
		return nil, err
	}
	tracker := discovery.NewTracker(env.Clients.Dial, r, env.Logger)
	srv, err := env.NewServer(cfg.Serve, []server.Handler{
		server.Mount(routerv1connect.RouterServiceName)(routerv1connect.NewRouterServiceHandler(r, env.HandlerOptions()...)),
	}, nil)
	if err != nil {
		return nil, err
	}
	cfg.Consul.CheckTLS = cfg.Serve.TLS.Enabled()
	member, err := consul.Join(cfg.Consul, env.Logger, env.Registry, consul.RouterService, "router-"+requestid.New()[:8], srv.Addr(),
		map[string]string{"version": process.Version()})
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("consul: %w", err)
	}
	if member != nil {
		srv.OnDrain(member.Deregister)
	}
	srv.OnDrain(r.Stop)
	s := &Service{cfg: cfg, srv: srv, tracker: tracker, member: member, log: env.Logger, Router: r, configured: cfg.Params}
	if cfg.Planner.Enabled {
		var publish plannersvc.Publish
		if member != nil {
			kv := member.Client.API.KV()
			publish = func(ctx context.Context, b []byte) error {
				_, err := kv.Put(&api.KVPair{Key: consul.PlannerPlanKey, Value: b}, (&api.WriteOptions{}).WithContext(ctx))
				return err
			}
		}
		if s.Planner, err = plannersvc.New(cfg.Planner, r, publish, env.Logger.With("component", "planner"), env.Registry); err != nil {
			srv.Close()
			return nil, err
		}
	} else if member != nil {
		s.follower = plannersvc.NewFollower(r, s.configuredParams, env.Logger.With("component", "planner"))
	}
	return s, nil
}

func (s *Service) configuredParams() router.Params {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.configured
}

// withPlan is p with the gating of the plan in force, the planner's or the
// one followed.
func (s *Service) withPlan(p router.Params) router.Params {
	switch {
	case s.Planner != nil:
		return s.Planner.Overlay(p)
	case s.follower != nil:
		return s.follower.Overlay(p)
	}
	return p
}

// resumePlan gives the planner the plan in Consul KV, when there is one: a
// router restarted with the planner keeps the fleet's shape, and its dwell.
func (s *Service) resumePlan(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pair, _, err := s.member.Client.API.KV().Get(consul.PlannerPlanKey, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil || pair == nil {
		if err != nil {
			s.log.Warn("planner: could not read the published plan; starting afresh", "error", err)
		}
		return
	}
	doc, err := plannersvc.ParseDocument(pair.Value)
	if err != nil {
		s.log.Warn("planner: the published plan is unreadable; starting afresh", "error", err)
		return
	}
	s.Planner.Resume(doc)
}

// Addr is where the router listens.
func (s *Service) Addr() string { return s.srv.Addr() }

// Run serves until ctx ends. With Consul, the workers are the passing instances of
// tandem-decode and tandem-prefill, and routing parameters follow the
// tandem/config/router key.
func (s *Service) Run(ctx context.Context) error {
	static := append(append([]string{}, s.cfg.DecodeWorkers...), s.cfg.PrefillWorkers...)
	s.tracker.Set(ctx, static)
	if s.member != nil {
		go s.member.Run(ctx)
		go s.member.Client.WatchServices(ctx, []string{consul.DecodeService, consul.PrefillService}, func(addrs []string) {
			s.tracker.Set(ctx, append(append([]string{}, static...), addrs...))
		})
		base := s.cfg.Params
		go s.member.Client.WatchKey(ctx, consul.RouterConfigKey, func(b []byte) error {
			p, err := consul.Overlay(base, b, router.Params.Validate)
			if err != nil {
				return err
			}
			s.mu.Lock()
			s.configured = p
			s.mu.Unlock()
			return s.Router.SetParams(s.withPlan(p))
		})
		if s.Planner != nil {
			s.resumePlan(ctx)
			go s.member.Client.WatchKey(ctx, consul.PlannerConfigKey, s.Planner.SetPolicy)
		}
		if s.follower != nil {
			go s.member.Client.WatchState(ctx, consul.PlannerPlanKey, s.follower.SetPlan)
			go s.follower.Run(ctx, followEvery)
		}
		// With Consul there may be no worker yet; the router serves and answers
		// Unavailable until one joins.
		s.srv.SetServing(true)
	} else {
		go func() {
			select {
			case <-s.tracker.Ready():
				s.srv.SetServing(true)
			case <-ctx.Done():
			}
		}()
	}
	if s.Planner != nil {
		go s.Planner.Run(ctx)
	}
	return s.srv.Serve(ctx)
}
