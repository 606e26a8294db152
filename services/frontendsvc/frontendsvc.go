// Package frontendsvc runs the frontend: the OpenAI-compatible HTTP API and the
// FrontendService on one port, backed by the router and the decode workers.
package frontendsvc

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/tandem-serve/tandem/console"
	"github.com/tandem-serve/tandem/frontend"
	"github.com/tandem-serve/tandem/internal/requestid"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	"github.com/tandem-serve/tandem/proto/tandem/frontend/v1/frontendv1connect"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	"github.com/tandem-serve/tandem/services/consul"
	"github.com/tandem-serve/tandem/services/process"
	"github.com/tandem-serve/tandem/services/rpc"
	"github.com/tandem-serve/tandem/services/server"
	"github.com/tandem-serve/tandem/services/telemetry"
	"github.com/tandem-serve/tandem/toolcall"
)

// Config is the frontend's flags.
type Config struct {
	Serve    process.Serve
	Router   string
	Frontend frontend.Config
	Consul   consul.Config
	// APIKeysFile holds one accepted API key per line ('#' starts a comment).
	APIKeysFile string
	// Console serves the live console at / (package console).
	Console bool
	// RefusedHold is how long a request every decode worker refused for room
	// is held and offered again before the client hears 429 (frontend.Routed.HoldRefused).
	RefusedHold time.Duration
}

// RegisterFlags registers the frontend's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Serve.RegisterFlags(fs, "127.0.0.1:8080")
	c.Serve.Public = true
	fs.StringVar(&c.Router, "router", "", "router address (host:port); with --consul and no --router, every passing tandem-router, round-robin")
	c.Consul.RegisterFlags(fs)
	c.RegisterRoleFlags(fs)
}

// RegisterRoleFlags registers the flags that say how the frontend treats its
// clients, the ones tandem up takes too; RegisterFlags adds where it listens and
// how it finds the router.
func (c *Config) RegisterRoleFlags(fs *flag.FlagSet) {
	d := frontend.DefaultConfig()
	c.Frontend = d
	fs.Int64Var(&c.Frontend.MaxBodyBytes, "max-body-bytes", d.MaxBodyBytes, "largest request body accepted (413 above)")
	fs.DurationVar(&c.Frontend.BodyReadTimeout, "body-read-timeout", d.BodyReadTimeout,
		"time allowed to read a request body, plus its length at --body-min-rate; a slower body gets 408 and the connection closes (0: no bound)")
	fs.Int64Var(&c.Frontend.BodyMinRate, "body-min-rate", d.BodyMinRate, "bytes per second a request body earns time at, past --body-read-timeout")
	fs.IntVar(&c.Frontend.DefaultMaxTokens, "default-max-tokens", d.DefaultMaxTokens, "output tokens when a request sets no max_tokens")
	fs.Func("default-temperature", fmt.Sprintf("temperature when a request sets none (default %g)", d.DefaultTemperature), func(s string) error {
		var t float32
		if _, err := fmt.Sscan(s, &t); err != nil {
			return err
		}
		c.Frontend.DefaultTemperature = t
		return nil
	})
	fs.StringVar(&c.APIKeysFile, "api-keys-file", "",
		"file of accepted API keys, one per line; clients send 'Authorization: Bearer KEY' (default: no authentication)")
	fs.IntVar(&c.Frontend.MaxInFlight, "max-in-flight", d.MaxInFlight, "requests generating at once (0: unbounded); more wait in a queue")
	fs.IntVar(&c.Frontend.MaxQueue, "max-queue", d.MaxQueue, "requests waiting for a slot; more get 429 with Retry-After")
	fs.DurationVar(&c.Frontend.QueueTimeout, "queue-timeout", d.QueueTimeout, "longest wait for a slot; then 503 with Retry-After")
	fs.DurationVar(&c.RefusedHold, "refused-hold", 0,
		"how long a request that every decode worker tried refused for room (at capacity, KV pool full) is held and offered again "+
			"as room frees, before the client gets 429 (0: at once); for clients that do not retry a 429")
	fs.StringVar(&c.Frontend.ToolCallParser, "tool-call-parser", "",
		"how tool calls are read from chat replies: "+strings.Join(toolcall.Names, ", ")+" (default: the family the model's chat template writes calls in, else hermes)")
	fs.BoolVar(&c.Console, "console", true,
		"serve the live console at / (chat, fleet, prefill decisions, policy); its data needs an API key when --api-keys-file is set")
}

// Validate checks the flags.
func (c *Config) Validate() error {
	if c.Router == "" && !c.Consul.Enabled() {
		return errors.New("--router: the router's address is required without --consul")
	}
	if err := c.Consul.ValidateServing(c.Serve.TLS.Enabled()); err != nil {
		return err
	}
	if c.RefusedHold < 0 {
		return fmt.Errorf("--refused-hold %s: must not be negative", c.RefusedHold)
	}
	return c.Frontend.Validate()
}

// Service is a started frontend.
type Service struct {
	srv     *server.Server
	workers *rpc.Conns // to workers: decode workers, and any worker for its model card
	router  *grpc.ClientConn
	member  *consul.Member
	// routers is fed from Consul when the router is discovered, not given.
	routers *manual.Resolver
	ready   *readiness
	loader  *modelLoader
	console *console.Console // nil with --console=false
}

// Start opens the listener. The frontend reports SERVING once the router does.
func Start(env *process.Env, cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.APIKeysFile != "" {
		keys, err := readKeys(cfg.APIKeysFile)
		if err != nil {
			return nil, err
		}
		cfg.Frontend.APIKeys = keys
	}
	var err error
	var routers *manual.Resolver
	var rc *grpc.ClientConn
	if cfg.Router != "" {
		rc, err = env.Clients.Dial(cfg.Router)
	} else {
		// Routers come and go in Consul; a manual resolver hands grpc-go the
		// current set and round_robin spreads Route calls over them.
		routers = manual.NewBuilderWithScheme("tandem-routers")
		rc, err = env.Clients.DialWith("tandem-routers:///router", grpc.WithResolvers(routers),
			grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`))
	}
	if err != nil {
		return nil, err
	}
	// A connection to a decode worker closes its socket after a minute without a
	// call and is forgotten after ten: a frontend in front of a large fleet holds
	// sockets only to the workers it is routed to, and none to workers long gone
	// (which gRPC would otherwise try to reconnect to for ever).
	workers := rpc.NewPeerConns(env.Clients.DialWith, process.PeerIdle)
	b := frontend.NewRouted(routerv1.NewRouterServiceClient(rc), func(addr string) (decodev1.DecodeServiceClient, error) {
		cc, err := workers.Get(addr)
		if err != nil {
			return nil, err
		}
		return decodev1.NewDecodeServiceClient(cc), nil
	})
	b.HoldRefused(cfg.RefusedHold, env.Registry)
	// The model comes from the workers' model cards (modelLoader); until then the
	// frontend answers 503 and reports NOT_SERVING.
	f, err := frontend.New(cfg.Frontend, nil, b, env.Logger, env.Registry)
	if err != nil {
		rc.Close()
		return nil, err
	}
	var con *console.Console
	api := f.HTTPHandler()
	if cfg.Console {
		con = newConsole(cfg, f, env)
		api = con.Handler(api)
	}
	if env.Tracer != nil {
		api = telemetry.TraceHTTP(api, env.Tracer)
	}
	srv, err := env.NewServer(cfg.Serve, []server.Handler{
		server.Mount(frontendv1connect.FrontendServiceName)(f.ConnectHandler(env.PublicHandlerOptions()...)),
	}, api)
	if err != nil {
		rc.Close()
		return nil, err
	}
	if con != nil {
		// The console's event streams never end on their own: they end when
		// shutdown begins, not after the grace period.
		srv.OnDrain(con.Close)
	}
	cfg.Consul.CheckTLS = cfg.Serve.TLS.Enabled()
	member, err := consul.Join(cfg.Consul, env.Logger, env.Registry, consul.FrontendService, "frontend-"+requestid.New()[:8], srv.Addr(),
		map[string]string{"version": process.Version()})
	if err != nil {
		rc.Close()
		srv.Close()
		return nil, fmt.Errorf("consul: %w", err)
	}
	if member != nil {
		srv.OnDrain(member.Deregister)
	}
	s := &Service{srv: srv, workers: workers, router: rc, member: member, routers: routers, console: con}
	// Not serving until the router's health says so, for /readyz as for gRPC.
	f.SetBackendServing(false)
	s.ready = &readiness{fe: f, setServing: srv.SetServing}
	s.loader = &modelLoader{router: routerv1.NewRouterServiceClient(rc), conns: workers, fe: f, backend: b, ready: s.ready, log: env.Logger,
		told: map[string]bool{}}
	return s, nil
}

// Addr is where the frontend listens.
func (s *Service) Addr() string { return s.srv.Addr() }

// Run serves until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	defer s.router.Close()
	defer s.workers.Close()
	if s.member != nil {
		go s.member.Run(ctx)
		if s.routers != nil {
			go s.member.Client.WatchServices(ctx, []string{consul.RouterService}, func(addrs []string) {
				st := resolver.State{}
				for _, a := range addrs {
					st.Addresses = append(st.Addresses, resolver.Address{Addr: a})
				}
				s.routers.UpdateState(st)
			})
		}
	}
	go s.loader.run(ctx)
	if s.console != nil {
		go s.console.Run(ctx)
		go s.console.FollowFleet(ctx, routerv1.NewRouterServiceClient(s.router))
	}
	go func() {
		// Serving only once the router is (and a model is loaded), so that a load
		// balancer in front never sends a request this frontend cannot place.
		hc := healthpb.NewHealthClient(s.router)
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		for err == nil {
			w, werr := hc.Watch(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
			if werr != nil {
				return
			}
			for {
				resp, rerr := w.Recv()
				if rerr != nil {
					break
				}
				serving := resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
				s.loader.fe.SetBackendServing(serving)
				s.ready.update()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return s.srv.Serve(ctx)
}

// readKeys reads an API key file: one key per line, blank lines and '#' comments
// ignored. A file with no key is an error, not an open door.
func readKeys(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--api-keys-file: %w", err)
	}
	var keys []string
	for _, line := range strings.Split(string(b), "\n") {
		if k := strings.TrimSpace(line); k != "" && !strings.HasPrefix(k, "#") {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("--api-keys-file %s: no keys in it", path)
	}
	return keys, nil
}
