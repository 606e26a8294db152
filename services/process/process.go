// Package process holds what every service process shares to start: the serving
// flags, the Prometheus registry, the logger and the client dialer.
package process

import (
	"connectrpc.com/connect"
	"flag"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tandem-serve/tandem/services/rpc"
	"github.com/tandem-serve/tandem/services/server"
)

// Serve is the flags every service shares.
type Serve struct {
	Listen string
	Grace  time.Duration
}

// RegisterFlags registers the shared serving flags with defaultListen.
func (s *Serve) RegisterFlags(fs *flag.FlagSet, defaultListen string) {
	fs.StringVar(&s.Listen, "listen", defaultListen, "address to serve gRPC, gRPC-Web, Connect, health, reflection and /metrics on")
	fs.DurationVar(&s.Grace, "grace", 15*time.Second, "how long in-flight requests may finish after SIGINT/SIGTERM")
}

// Env is what a service gets from its process.
type Env struct {
	Logger   *slog.Logger
	Registry *prometheus.Registry
	Clients  *rpc.Clients
	metrics  *rpc.ServerMetrics
}

// NewEnv makes a fresh registry (with Go and process collectors) and client dialer.
func NewEnv(logger *slog.Logger) *Env {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Env{
		Logger:   logger,
		Registry: reg,
		Clients:  rpc.NewClients(rpc.ClientConfig{UnaryTimeout: 10 * time.Second, Retries: 3, Logger: logger}, reg),
		metrics:  rpc.NewServerMetrics(reg),
	}
}

// NewServer opens the service's listener. Every Connect handler must have been
// built with HandlerOptions so that it logs, counts and recovers like the rest.
func (e *Env) NewServer(s Serve, handlers []server.Handler, extra http.Handler) (*server.Server, error) {
	return server.New(server.Config{Addr: s.Listen, Grace: s.Grace, Logger: e.Logger, Gatherer: e.Registry}, handlers, extra)
}

// HandlerOptions are the options for every Connect handler of this service.
func (e *Env) HandlerOptions() []connect.HandlerOption {
	return server.HandlerOptions(e.Logger, &rpc.ServerInterceptor{Logger: e.Logger, Metrics: e.metrics})
}
