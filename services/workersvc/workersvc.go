package workersvc

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/sglang"
	"github.com/tandem-serve/tandem/internal/requestid"
	"github.com/tandem-serve/tandem/prefill"
	"github.com/tandem-serve/tandem/proto/tandem/decode/v1/decodev1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/proto/tandem/worker/v1/workerv1connect"
	"github.com/tandem-serve/tandem/services/consul"
	"github.com/tandem-serve/tandem/services/discovery"
	"github.com/tandem-serve/tandem/services/kvport"
	"github.com/tandem-serve/tandem/services/process"
	"github.com/tandem-serve/tandem/services/server"
	"github.com/tandem-serve/tandem/worker"
)

// Service is a started worker.
type Service struct {
	ID     string
	Mode   workerv1.WorkerMode
	cfg    Config
	srv    *server.Server
	eng    engine.Engine
	worker *worker.Service
	member *consul.Member // nil without Consul
	// lender is an aggregated worker's registration as a prefill worker too
	// (--lend-prefill with Consul).
	lender *consul.Member
	// Prefill mode and lenders: the KV transfer port (nil when --kv-listen is off).
	kv  *kvport.Server
	log *slog.Logger
	// Decode and aggregated modes: the decision service, and the prefill workers it
	// may call.
	decode  *decode.Service
	dir     *discovery.Directory
	prefill *prefillers
	// prefillSvc is a prefill worker's (or a lender's) service, refusing new
	// prefills while drained.
	prefillSvc *prefill.Service
	// drained is what the last drain (or undo) asked; a decode worker serves once
	// it knows its prefill workers and is not drained.
	drained atomic.Bool
	ready   readiness
	// early serves health while a GPU engine server is waited for; nil otherwise.
	early *early
}

// Start builds the engine and opens the listener; the worker serves once Run runs.
// A worker in front of a GPU engine server listens first, serving its health
// (NOT_SERVING, with the reason at /readyz) while it waits for the server.
func Start(ctx context.Context, env *process.Env, cfg Config) (_ *Service, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	mode, _ := cfg.WorkerMode()
	id := cfg.ID
	if id == "" {
		id = cfg.Mode + "-" + requestid.New()[:8]
	}
	env.Logger = env.Logger.With("worker_id", id)
	s := &Service{ID: id, Mode: mode, cfg: cfg, log: env.Logger}
	if isGPU(cfg.Engine) {
		if s.srv, err = env.NewServer(cfg.Serve, nil, s.readyz()); err != nil {
			return nil, err
		}
		s.serveEarly(ctx)
		defer func() {
			if err != nil {
				s.stopEarly()
			}
		}()
		s.ready.waiting = "waiting for the " + cfg.Engine + " engine server at " + cfg.GPU.URL
		s.log.Info("not serving until the engine server answers; worker listening", "addr", s.srv.Addr(), "engine_url", cfg.GPU.URL)
		cfg.onEngineWait = func(err error) {
			s.update(func(r *readiness) {
				r.waiting = "waiting for the " + cfg.Engine + " engine server at " + cfg.GPU.URL + ": " + err.Error()
			})
		}
	}
	cfg.tracer = env.Tracer
	eng, err := cfg.NewEngine(ctx, env.Logger)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	defer func() {
		if err != nil {
			_ = eng.Close()
		}
	}()
	s.eng = eng
	opts := env.HandlerOptions()
	s.worker = worker.New(id, requestid.New(), mode, process.Version(), eng)
	card, err := modelCard(cfg, eng)
	if err != nil {
		return nil, err
	}
	s.worker.SetModelCard(card)
	handlers := []server.Handler{server.Mount(workerv1connect.WorkerServiceName)(workerv1connect.NewWorkerServiceHandler(s.worker, opts...))}
	defer func() {
		if err != nil && s.kv != nil {
			_ = s.kv.Close()
		}
	}()
	name := consul.DecodeService
	if cfg.servesPrefill(mode) {
		h, err := s.servePrefill(env, cfg)
		if err != nil {
			return nil, err
		}
		handlers = append(handlers, h)
	}
	switch mode {
	case workerv1.WorkerMode_WORKER_MODE_PREFILL:
		name = consul.PrefillService
	default:
		// An aggregated worker never calls a prefill worker, so it waits for none.
		await := mode == workerv1.WorkerMode_WORKER_MODE_DECODE && cfg.Consul.Enabled()
		s.dir = discovery.NewDirectory(workerv1.WorkerMode_WORKER_MODE_PREFILL, env.PeerInfo.Info, await, env.Logger)
		s.prefill = newPrefillers(s.dir, env.Peers, env.Logger)
		if s.decode, err = decode.New(cfg.DecodeConfig(id, mode), eng, s.prefill, env.Logger, env.Registry); err != nil {
			return nil, err
		}
		s.worker.SetPolicy(func() *workerv1.PrefillPolicy { return policyProto(s.decode.Params()) })
		handlers = append(handlers, server.Mount(decodev1connect.DecodeServiceName)(decodeHandler(s.decode, opts)))
	}
	registerPoolMetrics(env.Registry, eng)
	registerEventMetrics(env.Registry, eng)
	registerEngineMetrics(env.Registry, eng)
	if s.srv == nil {
		if s.srv, err = env.NewServer(cfg.Serve, handlers, s.readyz()); err != nil {
			return nil, err
		}
	} else {
		s.srv.Mount(handlers...)
	}
	s.update(func(r *readiness) { r.waiting = "" })
	info := eng.Info()
	cfg.Consul.CheckTLS = cfg.Serve.TLS.Enabled()
	meta := map[string]string{
		"mode": cfg.Mode, "model": s.worker.WorkerInfo().GetModel(), "engine": info.Engine, "block_size": strconv.Itoa(info.Layout.BlockSize),
		"kv_blocks": strconv.Itoa(info.TotalBlocks), "version": process.Version(),
	}
	if s.worker.WorkerInfo().GetNoKvEvents() {
		meta["kv_events"] = "none" // routing scores this worker on load alone
	}
	if cfg.Engine == "sglang" && mode == workerv1.WorkerMode_WORKER_MODE_PREFILL {
		if d, err := cfg.dialect(); err == nil {
			if b, ok := d.Disagg.(sglang.Bootstrap); ok {
				// For operators: decode engines are told it in each handoff's header.
				meta["engine_bootstrap"] = net.JoinHostPort(b.Host, strconv.Itoa(b.Port))
			}
		}
	}
	if port := s.worker.WorkerInfo().GetKvTransferPort(); port != 0 {
		// Decode workers that find this worker in Consul dial it there; those given
		// its address take it from WorkerInfo.
		meta["kv_transfer_port"] = strconv.Itoa(int(port))
	}
	if s.lends() {
		meta["lends_prefill"] = "true"
	}
	s.member, err = consul.Join(cfg.Consul, env.Logger, env.Registry, name, id, s.srv.Addr(), meta)
	if err == nil && s.lends() {
		s.lender, err = joinAsLender(cfg.Consul, s.member, id, meta)
	}
	if err != nil {
		if s.early == nil {
			s.srv.Close()
		}
		return nil, fmt.Errorf("consul: %w", err)
	}
	for _, m := range []*consul.Member{s.member, s.lender} {
		if m != nil {
			s.srv.OnDrain(m.Deregister)
		}
	}
	s.srv.OnDrain(s.worker.Stop)
	s.srv.OnDrain(func() { s.update(func(r *readiness) { r.stopping = true }) })
	s.worker.SetServingHook(func(serving bool) {
		s.drained.Store(!serving)
		if s.prefillSvc != nil {
			s.prefillSvc.SetDraining(!serving)
		}
		s.refreshServing()
		if s.kv != nil {
			s.kv.SetServing(serving) // a drained worker's KV port says so too
		}
	})
	s.followEngineHealth()
	return s, nil
}

// Addr is where the worker listens.
func (s *Service) Addr() string { return s.srv.Addr() }

// KVAddr is where a prefill worker serves KV transfers; empty without a KV port.
func (s *Service) KVAddr() string {
	if s.kv == nil {
		return ""
	}
	return s.kv.Addr()
}

// Run serves until ctx ends, then drains and closes the engine.
func (s *Service) Run(ctx context.Context) error {
	if s.dir != nil {
		s.dir.SetStatic(ctx, s.cfg.PrefillWorkers)
	}
	if s.lender != nil {
		go s.lender.Run(ctx)
	}
	if s.member != nil {
		go s.member.Run(ctx)
		if s.dir != nil {
			// Prefill workers from Consul join the static ones.
			go s.member.Client.WatchInstances(ctx, consul.PrefillService, func(is []consul.Instance) {
				s.dir.SetInstances(instances(is))
			})
			base := s.decode.Params()
			go s.member.Client.WatchKey(ctx, consul.DecodeConfigKey, func(b []byte) error {
				p, err := consul.Overlay(base, b, decode.Params.Validate)
				if err != nil {
					return err
				}
				return s.decode.SetParams(p)
			})
		}
	}
	kvDone := make(chan error, 1)
	if s.kv != nil {
		// A KV port that stops serving on its own takes the worker down with it:
		// a prefill worker that looks healthy while every handoff fails is worse.
		var stop context.CancelFunc
		ctx, stop = context.WithCancel(ctx)
		defer stop()
		s.kv.SetServing(true)
		go func() {
			err := s.kv.Serve(ctx)
			if err != nil {
				s.log.Error("KV transfer port stopped; shutting the worker down", "error", err)
			}
			stop()
			kvDone <- err
		}()
	} else {
		kvDone <- nil
	}
	s.update(func(r *readiness) { r.running = true })
	if !s.peersKnown() {
		go s.serveOncePeersKnown(ctx)
	}
	var err error
	if s.early != nil {
		stop := context.AfterFunc(ctx, s.early.cancel)
		defer stop()
		err = <-s.early.done
	} else {
		err = s.srv.Serve(ctx)
	}
	if kerr := <-kvDone; err == nil {
		err = kerr
	}
	_ = s.eng.Close()
	return err
}

// policyProto is a decode worker's prefill policy as its event stream carries it.
func policyProto(p decode.Params) *workerv1.PrefillPolicy {
	return &workerv1.PrefillPolicy{
		Policy: string(p.Policy), ShortPrefillThreshold: uint32(p.ShortPrefillThreshold), ItlWeight: p.ITLWeight,
		EnforceDisagg: p.EnforceDisagg, MaxPrefillQueueTokens: uint64(p.MaxPrefillQueueTokens),
	}
}
