// Package process holds what every service process shares to start: the serving
// flags, the Prometheus registry, the logger and the client dialer.
package process

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/tandem-serve/tandem/services/discovery"
	"github.com/tandem-serve/tandem/services/kvport"
	"github.com/tandem-serve/tandem/services/rpc"
	"github.com/tandem-serve/tandem/services/server"
	"github.com/tandem-serve/tandem/services/tlsconf"
)

// version, when set at link time (-ldflags "-X
// github.com/tandem-serve/tandem/services/process.version=v1.2.3"), is the build's
// version; otherwise the go command's build info says it.
var version string

var buildVersion = sync.OnceValue(func() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
})

// Version is the build's version, as tandem version prints it and every service
// reports it in WorkerInfo and its Consul metadata.
func Version() string { return buildVersion() }

// Serve is the flags every service shares.
type Serve struct {
	Listen string
	Grace  time.Duration
	TLS    tlsconf.Config
	// Public marks a port that end users call (the frontend's): it serves TLS but
	// asks them for no client certificate.
	Public bool
}

// RegisterFlags registers the shared serving flags with defaultListen.
func (s *Serve) RegisterFlags(fs *flag.FlagSet, defaultListen string) {
	fs.StringVar(&s.Listen, "listen", defaultListen, "address to serve gRPC, gRPC-Web, Connect, health, reflection and /metrics on")
	s.RegisterDrainFlag(fs)
	s.TLS.RegisterFlags(fs)
}

// RegisterDrainFlag registers --drain-timeout alone, for a process that picks its
// own listeners (tandem up).
func (s *Serve) RegisterDrainFlag(fs *flag.FlagSet) {
	fs.DurationVar(&s.Grace, "drain-timeout", 15*time.Second,
		"after SIGINT/SIGTERM (deregister, NOT_SERVING, stop accepting), how long in-flight requests may finish before they are cut")
}

// Env is what a service gets from its process.
type Env struct {
	Logger   *slog.Logger
	Registry *prometheus.Registry
	Clients  *rpc.Clients
	// Peers is the connection cache for peers called now and then (a decode
	// worker's prefill workers): dialled on first use, closed when idle. Services
	// in one process share one (tandem up), so that a connection to a worker serves
	// every service that calls it.
	Peers *rpc.Conns
	// PeerInfo asks peers who they are over Peers, sharing answers among the
	// services of the process (discovery.InfoCache).
	PeerInfo *discovery.InfoCache
	// Tracer is the service's tracer provider, nil when the process exports no
	// traces (telemetry.StartTracing): only then do servers and clients carry
	// spans and W3C traceparent.
	Tracer  trace.TracerProvider
	metrics *rpc.ServerMetrics
}

// PeerIdle is how long a connection to a peer may carry no call before its socket
// is closed. Reopening one costs a TCP (and TLS) handshake, about a millisecond on
// a LAN, against a handoff's tens of milliseconds; a minute keeps the connections
// of a steady stream of handoffs open and frees those of peers no longer used.
const PeerIdle = time.Minute

// NewEnv makes a fresh registry (with Go and process collectors) and a client
// dialer that uses t for every connection to another service; tracer, when not nil,
// traces its servers and clients (Env.Tracer).
func NewEnv(logger *slog.Logger, t tlsconf.Config, tracer trace.TracerProvider) (*Env, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	clientTLS, err := t.Client()
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	clients := rpc.NewClients(rpc.ClientConfig{UnaryTimeout: 10 * time.Second, Retries: 3, Logger: logger, TLS: clientTLS, Tracer: tracer}, reg)
	peers := rpc.NewPeerConns(clients.DialWith, PeerIdle)
	return &Env{
		Logger:   logger,
		Registry: reg,
		Clients:  clients,
		Peers:    peers,
		PeerInfo: discovery.NewInfoCache(discovery.InfoVia(peers.Get), time.Second),
		Tracer:   tracer,
		metrics:  rpc.NewServerMetrics(reg),
	}, nil
}

// NewServer opens the service's listener. Every Connect handler must have been
// built with HandlerOptions so that it logs, counts and recovers like the rest.
func (e *Env) NewServer(s Serve, handlers []server.Handler, extra http.Handler) (*server.Server, error) {
	serverTLS, err := s.TLS.Server(!s.Public)
	if err != nil {
		return nil, err
	}
	return server.New(server.Config{Addr: s.Listen, Grace: s.Grace, Logger: e.Logger, Gatherer: e.Registry, TLS: serverTLS}, handlers, extra)
}

// HandlerOptions are the options for every Connect handler of this service.
// With tracing, a span per call (a child of the caller's traceparent) encloses the
// rest, so that the rpc log line carries its trace id.
func (e *Env) HandlerOptions() []connect.HandlerOption { return e.handlerOptions(false) }

// PublicHandlerOptions are HandlerOptions for the services users call (the
// frontend's): with tracing, a call without a traceparent starts a trace, where
// elsewhere it is a background call and is not traced.
func (e *Env) PublicHandlerOptions() []connect.HandlerOption { return e.handlerOptions(true) }

func (e *Env) handlerOptions(public bool) []connect.HandlerOption {
	i := []connect.Interceptor{&rpc.ServerInterceptor{Logger: e.Logger, Metrics: e.metrics}}
	if e.Tracer != nil {
		i = append([]connect.Interceptor{rpc.TraceInterceptor(e.Tracer, public)}, i...)
	}
	return server.HandlerOptions(e.Logger, i...)
}

// KVListenOff turns a prefill worker's KV transfer port off.
const KVListenOff = "off"

// NewKVPort opens a prefill worker's KV transfer port, with the same TLS and
// interceptors as its main port. listen "" is the main listen address's host and
// the next port (9001 for 9000), so that firewall rules and port mappings can be
// written ahead; a free port when the main one is picked freely (port 0, as in
// tests and tandem up). Decode workers learn it from WorkerInfo either way.
// KVListenOff means none, and returns nil.
func (e *Env) NewKVPort(s Serve, listen string, register func(grpc.ServiceRegistrar)) (*kvport.Server, error) {
	if listen == KVListenOff {
		return nil, nil
	}
	if listen == "" {
		host, port, err := net.SplitHostPort(s.Listen)
		if err != nil {
			return nil, fmt.Errorf("--listen %q: %w", s.Listen, err)
		}
		next := "0"
		if p, err := strconv.Atoi(port); err == nil && p > 0 && p < 65535 {
			next = strconv.Itoa(p + 1)
		}
		listen = net.JoinHostPort(host, next)
	}
	serverTLS, err := s.TLS.Server(true)
	if err != nil {
		return nil, err
	}
	i := &rpc.ServerInterceptor{Logger: e.Logger, Metrics: e.metrics}
	opts := i.GRPCServerOptions()
	if e.Tracer != nil {
		opts = append(opts, rpc.TraceGRPCServer(e.Tracer))
	}
	return kvport.New(kvport.Config{Addr: listen, Grace: s.Grace, Logger: e.Logger, TLS: serverTLS, Options: opts}, register)
}
