package workersvc

import (
	"google.golang.org/grpc"

	"github.com/tandem-serve/tandem/prefill"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
	"github.com/tandem-serve/tandem/proto/tandem/prefill/v1/prefillv1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/services/consul"
	"github.com/tandem-serve/tandem/services/process"
	"github.com/tandem-serve/tandem/services/server"
)

// servePrefill builds the prefill service over the worker's engine, the handler
// that mounts it and its KV transfer port: a prefill worker's, and a lender's,
// an aggregated worker with --lend-prefill that takes remote prefills for decode
// workers beside its own traffic, so that no device is parked in a prefill-only
// role (role-flexible workers).
func (s *Service) servePrefill(env *process.Env, cfg Config) (server.Handler, error) {
	pc := prefill.DefaultConfig()
	pc.WorkerID, pc.MaxPromptTokens, pc.MaxQueuedTokens = s.ID, s.eng.Info().ContextLength, cfg.MaxQueuedTokens
	ps, err := prefill.New(pc, s.eng, env.Logger, env.Registry)
	if err != nil {
		return server.Handler{}, err
	}
	s.prefillSvc = ps
	s.worker.SetLentQueue(ps)
	h := server.Mount(prefillv1connect.PrefillServiceName)(prefillv1connect.NewPrefillServiceHandler(ps, env.HandlerOptions()...))
	if s.kv, err = env.NewKVPort(cfg.Serve, cfg.KVListen, func(r grpc.ServiceRegistrar) { prefillv1.RegisterPrefillServiceServer(r, ps.GRPC()) }); err != nil {
		return server.Handler{}, err
	}
	if s.kv != nil {
		port := s.kv.Port()
		if cfg.KVAdvertisePort != 0 {
			port = cfg.KVAdvertisePort
		}
		s.worker.SetKVTransferPort(port)
	}
	if s.Mode == workerv1.WorkerMode_WORKER_MODE_AGGREGATED {
		s.worker.SetLendsPrefill(true)
		s.log.Info("lending prefill: serving remote prefills for decode workers too", "kv_transfer_port", s.worker.WorkerInfo().GetKvTransferPort())
	}
	return h, nil
}

// lends: an aggregated worker serving Prefill for decode workers.
func (s *Service) lends() bool {
	return s.Mode == workerv1.WorkerMode_WORKER_MODE_AGGREGATED && s.prefillSvc != nil
}

// lenderSuffix ends the id of a lender's registration under the prefill service:
// one agent holds one service per id, and the worker's own id is its decode
// registration's.
const lenderSuffix = "-lend"

// joinAsLender registers a lender under the prefill service as well, so that
// decode workers discovering prefill workers in Consul find it; its worker_id
// metadata is the id the router names it by.
func joinAsLender(cfg consul.Config, member *consul.Member, id string, meta map[string]string) (*consul.Member, error) {
	if member == nil {
		return nil, nil // no Consul
	}
	m := make(map[string]string, len(meta)+1)
	for k, v := range meta {
		m[k] = v
	}
	m["worker_id"] = id
	return member.Also(cfg, consul.PrefillService, id+lenderSuffix, m)
}
