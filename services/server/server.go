// Package server runs one tandem service on one port: Connect, gRPC and gRPC-Web
// handlers on an HTTP/1 + cleartext HTTP/2 server, with grpc.health.v1, server
// reflection and /metrics beside them, and a graceful shutdown.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/tandem-serve/tandem/services/tlsconf"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler is one Connect service to mount: its path prefix and handler, as the
// generated New...Handler functions return them, and its full name for health and
// reflection.
type Handler struct {
	Name    string
	Path    string
	Handler http.Handler
}

// Config is what a Server needs.
type Config struct {
	// Addr to listen on; ":0" or "127.0.0.1:0" picks a free port.
	Addr string
	// Grace bounds how long in-flight requests may run after shutdown begins.
	Grace time.Duration
	// Logger and Gatherer may not be nil.
	Logger   *slog.Logger
	Gatherer prometheus.Gatherer
	// TLS, when set, serves HTTPS (HTTP/1.1 and HTTP/2) instead of cleartext. If it
	// asks for client certificates, every call but health checks must present one.
	TLS *tls.Config
}

// MaxStreams is the streams one HTTP/2 connection may hold open at once. A
// frontend carries all its requests to a worker on one connection, and grpc-go
// holds a call back while the server's limit is reached: Go's default of 250
// was a queue in front of every decode worker that no admission limit, metric
// or policy of the worker could see (a decode worker admits 512 by default).
// The workers' admission bounds their load; this only bounds one client's
// streams, far above it.
const MaxStreams = 16384

// Server serves until its context ends. It is listening when New returns.
type Server struct {
	cfg      Config
	ln       net.Listener
	http     *http.Server
	health   *grpchealth.StaticChecker
	mux      *http.ServeMux
	mu       sync.Mutex
	names    []string // guarded by mu
	draining []func()
}

// New opens the listener and assembles the handlers. extra, if not nil, serves every
// path the Connect services do not (the frontend's OpenAI API).
func New(cfg Config, handlers []Handler, extra http.Handler) (*Server, error) {
	if cfg.Logger == nil || cfg.Gatherer == nil {
		return nil, errors.New("server: Logger and Gatherer are required")
	}
	mux := http.NewServeMux()
	names := make([]string, 0, len(handlers))
	for _, h := range handlers {
		mux.Handle(h.Path, h.Handler)
		names = append(names, h.Name)
	}
	// Health starts NOT_SERVING for every service: the caller marks it ready.
	health := grpchealth.NewStaticChecker()
	for _, n := range append([]string{""}, names...) {
		health.SetStatus(n, grpchealth.StatusNotServing)
	}
	mux.Handle(grpchealth.NewHandler(health))
	s := &Server{cfg: cfg, health: health, names: names, mux: mux}
	reflector := grpcreflect.NewReflector(s)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	mux.Handle("/metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}))
	if extra != nil {
		mux.Handle("/", extra)
	}

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	p := new(http.Protocols)
	p.SetHTTP1(true)
	var handler http.Handler = mux
	if cfg.TLS != nil {
		p.SetHTTP2(true)
		if cfg.TLS.ClientAuth == tls.VerifyClientCertIfGiven {
			handler = tlsconf.RequireClientCert(mux)
		}
	} else {
		// Cleartext HTTP/2 lets grpc-go clients and grpcurl -plaintext in on the same port.
		p.SetUnencryptedHTTP2(true)
	}
	s.ln = ln
	s.http = &http.Server{
		Handler:           handler,
		Protocols:         p,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: MaxStreams},
		TLSConfig:         cfg.TLS,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// Names are the services mounted, with health and reflection, for reflection.
func (s *Server) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append(slices.Clone(s.names), grpchealth.HealthV1ServiceName, grpcreflect.ReflectV1ServiceName, grpcreflect.ReflectV1AlphaServiceName)
}

// Mount adds services to a server that already listens (a worker that serves its
// health while its engine server starts): each is NOT_SERVING until SetServing.
func (s *Server) Mount(handlers ...Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range handlers {
		s.mux.Handle(h.Path, h.Handler)
		s.names = append(s.names, h.Name)
		s.health.SetStatus(h.Name, grpchealth.StatusNotServing)
	}
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// SetServing marks every service SERVING or NOT_SERVING in grpc.health.v1.
func (s *Server) SetServing(serving bool) {
	st := grpchealth.StatusNotServing
	if serving {
		st = grpchealth.StatusServing
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range append([]string{""}, s.names...) {
		s.health.SetStatus(n, st)
	}
}

// OnDrain registers f to run when shutdown begins, before health turns NOT_SERVING
// and in-flight requests are waited for: deregistering from discovery comes first,
// so that nobody is sent here while it drains.
func (s *Server) OnDrain(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.draining = append(s.draining, f)
}

// Serve serves until ctx ends, then drains: drain hooks (deregistration),
// NOT_SERVING, stop accepting, and wait up to Grace for in-flight requests before
// closing the rest.
func (s *Server) Serve(ctx context.Context) error {
	return Lifecycle{
		Serve: func() error {
			if s.cfg.TLS != nil {
				return s.http.ServeTLS(s.ln, "", "")
			}
			return s.http.Serve(s.ln)
		},
		Stopped: http.ErrServerClosed,
		Drain: func() {
			s.mu.Lock()
			hooks := s.draining
			s.mu.Unlock()
			for _, f := range hooks {
				f()
			}
			s.SetServing(false)
		},
		Graceful: s.http.Shutdown,
		Cut:      s.http.Close,
		Grace:    s.cfg.Grace,
		Log:      s.cfg.Logger,
		Cutting:  "closing remaining connections",
	}.Run(ctx)
}

// HandlerOptions are the options every Connect handler of a service takes.
// A panic in a handler becomes CodeInternal for that call alone, and is logged.
func HandlerOptions(logger *slog.Logger, interceptors ...connect.Interceptor) []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithInterceptors(interceptors...),
		connect.WithRecover(func(ctx context.Context, spec connect.Spec, _ http.Header, p any) error {
			logger.ErrorContext(ctx, "panic in handler", "procedure", spec.Procedure, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			return connect.NewError(connect.CodeInternal, fmt.Errorf("internal error in %s", spec.Procedure))
		}),
	}
}

// Mount pairs a service's full name with what its generated New...Handler returns:
// server.Mount(fooconnect.FooServiceName)(fooconnect.NewFooServiceHandler(impl)).
func Mount(name string) func(path string, h http.Handler) Handler {
	return func(path string, h http.Handler) Handler { return Handler{Name: name, Path: path, Handler: h} }
}

// Close releases the listener of a server that will not Serve.
func (s *Server) Close() error { return s.ln.Close() }
