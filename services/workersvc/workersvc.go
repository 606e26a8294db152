package workersvc

import (
	"context"
	"fmt"

	"github.com/tandem-serve/tandem/services/discovery"
	"google.golang.org/grpc"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/prefill"
	"github.com/tandem-serve/tandem/proto/tandem/decode/v1/decodev1connect"
	"github.com/tandem-serve/tandem/proto/tandem/prefill/v1/prefillv1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/proto/tandem/worker/v1/workerv1connect"
	"github.com/tandem-serve/tandem/services/process"
	"github.com/tandem-serve/tandem/services/server"
	"github.com/tandem-serve/tandem/services/telemetry"
	"github.com/tandem-serve/tandem/worker"
)

// Version is reported in WorkerInfo; cmd/tandem sets it.
var Version = "dev"

// Service is a started worker.
type Service struct {
	ID     string
	Mode   workerv1.WorkerMode
	srv    *server.Server
	eng    engine.Engine
	worker *worker.Service
	// Decode mode: the prefill workers this worker may call.
	tracker      *discovery.Tracker
	prefill      *prefillers
	prefillAddrs []string
}

// Start builds the engine and opens the listener; the worker serves once Run runs.
func Start(ctx context.Context, env *process.Env, cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	mode, _ := cfg.WorkerMode()
	eng, err := cfg.NewEngine(env.Logger)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	id := cfg.ID
	if id == "" {
		id = cfg.Mode + "-" + telemetry.NewRequestID()[:8]
	}
	env.Logger = env.Logger.With("worker_id", id)
	opts := env.HandlerOptions()
	ws := worker.New(id, telemetry.NewRequestID(), mode, Version, eng)
	var (
		tracker *discovery.Tracker
		pf      *prefillers
	)
	handlers := []server.Handler{server.Mount(workerv1connect.WorkerServiceName)(workerv1connect.NewWorkerServiceHandler(ws, opts...))}
	switch mode {
	case workerv1.WorkerMode_WORKER_MODE_PREFILL:
		ps, err := prefill.New(prefill.Config{WorkerID: id, ChunkBytes: 1 << 20, MaxLease: 30e9, MaxPromptTokens: eng.Info().ContextLength}, eng, env.Logger, env.Registry)
		if err != nil {
			return nil, err
		}
		handlers = append(handlers, server.Mount(prefillv1connect.PrefillServiceName)(prefillv1connect.NewPrefillServiceHandler(ps, opts...)))
	default:
		tracker = discovery.NewTracker(env.Clients.Dial, nil, env.Logger)
		pf = &prefillers{tracker: tracker, dial: env.Clients.Dial, conns: map[string]*grpc.ClientConn{}}
		ds, err := decode.New(cfg.DecodeConfig(id, mode), eng, pf, env.Logger, env.Registry)
		if err != nil {
			return nil, err
		}
		ws.SetPolicy(func() string { return string(ds.Params().Policy) })
		handlers = append(handlers, server.Mount(decodev1connect.DecodeServiceName)(decodev1connect.NewDecodeServiceHandler(ds, opts...)))
	}
	srv, err := env.NewServer(cfg.Serve, handlers, nil)
	if err != nil {
		_ = eng.Close()
		return nil, err
	}
	srv.OnDrain(ws.Stop)
	return &Service{ID: id, Mode: mode, srv: srv, eng: eng, worker: ws, tracker: tracker, prefill: pf, prefillAddrs: cfg.PrefillWorkers}, nil
}

// Addr is where the worker listens.
func (s *Service) Addr() string { return s.srv.Addr() }

// Run serves until ctx ends, then drains and closes the engine.
func (s *Service) Run(ctx context.Context) error {
	if s.tracker != nil {
		s.tracker.Set(ctx, s.prefillAddrs)
		defer s.prefill.close()
	}
	s.srv.SetServing(true)
	err := s.srv.Serve(ctx)
	_ = s.eng.Close()
	return err
}
