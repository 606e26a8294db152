// Package app is tandem's roles as modules (services/modules): the prefill and
// decode workers, the router and the frontend. A role's command runs its module
// alone, its peers found by the addresses its flags give or through Consul;
// tandem up runs every module in one process on loopback, each wired to the ones
// it depends on, and waits until all of them serve.
package app

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tandem-serve/tandem/services/admin"
	"github.com/tandem-serve/tandem/services/discovery"
	"github.com/tandem-serve/tandem/services/frontendsvc"
	"github.com/tandem-serve/tandem/services/modules"
	"github.com/tandem-serve/tandem/services/process"
	"github.com/tandem-serve/tandem/services/routersvc"
	"github.com/tandem-serve/tandem/services/rpc"
	"github.com/tandem-serve/tandem/services/telemetry"
	"github.com/tandem-serve/tandem/services/tlsconf"
	"github.com/tandem-serve/tandem/services/workersvc"
)

// The modules, by the names of the commands that run them; Up runs them all.
const (
	Prefill  = "prefill"
	Decode   = "decode"
	Router   = "router"
	Frontend = "frontend"
	Up       = "up"
)

// Config is every role's configuration, and tandem up's own.
type Config struct {
	Frontend frontendsvc.Config
	Router   routersvc.Config
	// Worker is every worker's; tandem up gives each its mode, id and address.
	Worker   workersvc.Config
	LogLevel string
	// Tracing says where the process's traces go (off by default).
	Tracing telemetry.Tracing
	// PprofAddr, when set, serves the runtime profiles there (servePprof).
	PprofAddr string

	// tandem up: the workers it runs, and where the frontend listens.
	Prefill, Decode int
	// Lenders are aggregated workers lending prefill, which the planner moves
	// between prefill and decode.
	Lenders  int
	HTTPAddr string
}

// RegisterFlags registers target's flags. A role's command takes every flag of
// its role. tandem up takes the flags that shape each role's behaviour
// (RegisterRoleFlags), and sets the rest itself: every listener on loopback, the
// workers on free ports, no Consul and no TLS.
func (c *Config) RegisterFlags(fs *flag.FlagSet, target string) {
	switch target {
	case Frontend:
		c.Frontend.RegisterFlags(fs)
	case Router:
		c.Router.RegisterFlags(fs)
	case Decode, Prefill:
		c.Worker.RegisterFlags(fs, target)
	case Up:
		fs.StringVar(&c.HTTPAddr, "http-addr", "127.0.0.1:8080", "address of the frontend: OpenAI HTTP API, Connect and gRPC")
		fs.IntVar(&c.Prefill, "prefill", 1, "prefill workers to run")
		fs.IntVar(&c.Decode, "decode", 1, "decode workers to run")
		fs.IntVar(&c.Lenders, "lenders", 0, "aggregated workers lending prefill (--lend-prefill) to run beside them, which --planner moves between prefill and decode")
		c.Worker.Serve.RegisterDrainFlag(fs)
		c.Worker.RegisterRoleFlags(fs, Decode)
		c.Frontend.RegisterRoleFlags(fs)
		c.Router.RegisterRoleFlags(fs)
	}
	c.Tracing.RegisterFlags(fs)
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn or error (logs are JSON on stderr)")
	fs.StringVar(&c.PprofAddr, "pprof-addr", "", "serve Go's runtime profiles (net/http/pprof, /debug/pprof/) on this address, "+
		"e.g. 127.0.0.1:6060; off when empty. For diagnosis only: keep it on loopback")
}

// app is one process's modules and what they have started, for the modules that
// depend on them.
type app struct {
	cfg            Config
	up             bool
	stdout, stderr io.Writer

	// peers is the one cache of connections to peers of the process's services.
	peers    *rpc.Conns
	peerInfo *discovery.InfoCache
	// tracer gives each service its tracer provider; nil when tracing is off.
	tracer *telemetry.Tracer

	prefillAddrs, decodeAddrs []string
	router                    *routersvc.Service
	frontend                  *frontendsvc.Service
}

// Run runs target's module (or, for Up, all of them) until ctx ends.
func Run(ctx context.Context, cfg Config, target string, stdout, stderr io.Writer) error {
	a := &app{cfg: cfg, up: target == Up, stdout: stdout, stderr: stderr}
	defer func() {
		if a.peers != nil {
			a.peers.Close() // every service has stopped
		}
	}()
	if _, err := telemetry.NewLogger(io.Discard, cfg.LogLevel, ""); err != nil {
		return err
	}
	tracer, err := telemetry.StartTracing(ctx, cfg.Tracing)
	if err != nil {
		return err
	}
	a.tracer = tracer
	defer func() {
		// Flush the last spans, with a bound: a collector gone away must not hold up exit.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tracer.Shutdown(fctx); err != nil {
			a.logger(target).Warn("tracing: flushing spans at exit", "error", err)
		}
	}()
	if cfg.PprofAddr != "" {
		if _, err := servePprof(ctx, cfg.PprofAddr, a.logger(target)); err != nil {
			return err
		}
	}
	var reg modules.Registry
	reg.Register(modules.Module{Name: Prefill, Start: a.startPrefill})
	reg.Register(modules.Module{Name: Decode, Deps: []string{Prefill}, Start: a.startDecode})
	reg.Register(modules.Module{Name: Router, Deps: []string{Decode, Prefill}, Start: a.startRouter})
	reg.Register(modules.Module{Name: Frontend, Deps: []string{Router}, Start: a.startFrontend})
	if !a.up {
		return reg.Run(ctx, []string{target}, nil, nil)
	}
	if cfg.Decode < 1 || cfg.Prefill < 0 || cfg.Lenders < 0 {
		return errors.New("up: --decode must be at least 1, --prefill and --lenders at least 0")
	}
	if cfg.Worker.Mode == "prefill" {
		return errors.New("up: --mode is the decode workers' mode: decode or aggregated")
	}
	return reg.Run(ctx, reg.Names(), waitServing, a.ready)
}

// logger is a service's logger; the level was checked when Run began.
func (a *app) logger(service string) *slog.Logger {
	log, _ := telemetry.NewLogger(a.stderr, a.cfg.LogLevel, service)
	return log
}

// env is a service's process environment: with its own TLS settings when it runs
// alone, in cleartext on loopback under tandem up. The services of a process
// share the first one's peer connections and answers to who listens where, as
// one process should: under tandem up, 900 decode workers that each kept their own
// to 100 prefill workers would need 90,000 connections and ask 90,000 times.
// Those connections' client metrics are on that first service's /metrics.
func (a *app) env(service string, t tlsconf.Config) (*process.Env, error) {
	if a.up {
		t = tlsconf.Config{}
	}
	env, err := process.NewEnv(a.logger(service), t, a.tracer.Provider(service))
	if err != nil {
		return nil, err
	}
	if a.peers == nil {
		a.peers, a.peerInfo = env.Peers, env.PeerInfo
	}
	env.Peers, env.PeerInfo = a.peers, a.peerInfo
	return env, nil
}

// startPrefill starts tandem up's prefill workers, or the one worker its command
// configures.
func (a *app) startPrefill(ctx context.Context) ([]modules.Service, error) {
	if !a.up {
		return a.startWorker(ctx, a.cfg.Worker, Prefill)
	}
	svcs, err := a.startWorkers(ctx, a.cfg.Prefill, &a.prefillAddrs, func(cfg *workersvc.Config, i int) {
		cfg.Mode, cfg.ID = "prefill", fmt.Sprintf("prefill-%d", i)
	})
	if err != nil {
		return svcs, err
	}
	// Lenders prefill for the decode workers, which find them among their
	// prefill workers; the router, asking each who it is, sees that they
	// decode too.
	lenders, err := a.startWorkers(ctx, a.cfg.Lenders, &a.prefillAddrs, func(cfg *workersvc.Config, i int) {
		cfg.Mode, cfg.LendPrefill, cfg.ID = "aggregated", true, fmt.Sprintf("lender-%d", i)
	})
	return append(svcs, lenders...), err
}

// startDecode starts tandem up's decode workers, on the prefill workers it runs,
// or the one worker its command configures.
func (a *app) startDecode(ctx context.Context) ([]modules.Service, error) {
	if !a.up {
		return a.startWorker(ctx, a.cfg.Worker, Decode)
	}
	return a.startWorkers(ctx, a.cfg.Decode, &a.decodeAddrs, func(cfg *workersvc.Config, i int) {
		cfg.ID, cfg.PrefillWorkers = fmt.Sprintf("decode-%d", i), a.prefillAddrs
	})
}

// startWorkers starts n of tandem up's workers, each configured by set, and adds
// their addresses to addrs.
func (a *app) startWorkers(ctx context.Context, n int, addrs *[]string, set func(cfg *workersvc.Config, i int)) ([]modules.Service, error) {
	var svcs []modules.Service
	for i := range n {
		cfg := a.cfg.Worker
		set(&cfg, i)
		w, err := a.startWorker(ctx, cfg, cfg.Mode)
		if err != nil {
			return svcs, fmt.Errorf("%s: %w", cfg.ID, err)
		}
		svcs = append(svcs, w...)
		*addrs = append(*addrs, w[0].Addr())
	}
	return svcs, nil
}

func (a *app) startWorker(ctx context.Context, cfg workersvc.Config, service string) ([]modules.Service, error) {
	if a.up {
		cfg.Serve.Listen = "127.0.0.1:0"
	}
	env, err := a.env(service, cfg.Serve.TLS)
	if err != nil {
		return nil, err
	}
	w, err := workersvc.Start(ctx, env, cfg)
	if err != nil {
		return nil, err
	}
	attrs := []any{"addr", w.Addr(), "worker_id", w.ID, "mode", w.Mode.String()}
	if kv := w.KVAddr(); kv != "" {
		attrs = append(attrs, "kv_transfer_addr", kv)
	}
	a.logger(service).Info("worker listening", attrs...)
	return []modules.Service{w}, nil
}

// startRouter starts the router: under tandem up over the workers it runs.
func (a *app) startRouter(context.Context) ([]modules.Service, error) {
	cfg := a.cfg.Router
	if a.up {
		cfg.DecodeWorkers, cfg.PrefillWorkers, cfg.BlockSize = a.decodeAddrs, a.prefillAddrs, a.cfg.Worker.BlockSize
		cfg.Serve.Listen, cfg.Serve.Grace = "127.0.0.1:0", a.cfg.Worker.Serve.Grace
	}
	r, err := startOne(a, "router", cfg.Serve.TLS, func(env *process.Env) (*routersvc.Service, error) { return routersvc.Start(env, cfg) })
	if err != nil {
		return nil, err
	}
	a.router = r
	return []modules.Service{r}, nil
}

// startFrontend starts the frontend: under tandem up on --http-addr, over the
// router it runs.
func (a *app) startFrontend(context.Context) ([]modules.Service, error) {
	cfg := a.cfg.Frontend
	if a.up {
		cfg.Router = a.router.Addr()
		cfg.Serve.Listen, cfg.Serve.Grace = a.cfg.HTTPAddr, a.cfg.Worker.Serve.Grace
	}
	f, err := startOne(a, "frontend", cfg.Serve.TLS, func(env *process.Env) (*frontendsvc.Service, error) { return frontendsvc.Start(env, cfg) })
	if err != nil {
		return nil, err
	}
	a.frontend = f
	return []modules.Service{f}, nil
}

// startOne starts one service in an environment of its own and says where it
// listens.
func startOne[S modules.Service](a *app, service string, t tlsconf.Config, start func(*process.Env) (S, error)) (S, error) {
	var none S
	env, err := a.env(service, t)
	if err != nil {
		return none, err
	}
	s, err := start(env)
	if err != nil {
		return none, a.named(service, err)
	}
	a.logger(service).Info(service+" listening", "addr", s.Addr())
	return s, nil
}

// named says which service failed, when tandem up runs several.
func (a *app) named(service string, err error) error {
	if a.up {
		return fmt.Errorf("%s: %w", service, err)
	}
	return err
}

// ready says where tandem up serves, once everything does. The other services'
// ports are free ones; it says them too, for tandem workers, route, drain and
// health, and for their /metrics.
func (a *app) ready() {
	f, r := a.frontend.Addr(), a.router.Addr()
	a.logger("up").Info("services ready", "frontend", f, "router", r, "decode_workers", a.decodeAddrs, "prefill_workers", a.prefillAddrs)
	fmt.Fprintf(a.stdout, "ready: http://%s\n", f)
	fmt.Fprintf(a.stdout, "router %s, decode workers %s, prefill workers %s (tandem workers --router %s)\n",
		r, cmp.Or(strings.Join(a.decodeAddrs, " "), "none"), cmp.Or(strings.Join(a.prefillAddrs, " "), "none"), r)
}

// waitServing polls s's grpc.health.v1 over the network until it says SERVING,
// exactly as an external checker would see it.
func waitServing(ctx context.Context, s modules.Service) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st, err := admin.Health(ctx, s.Addr(), "", time.Second, insecure.NewCredentials())
		if err == nil && st == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("up: %s did not become SERVING: %v %v", s.Addr(), st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
