package workersvc

import (
	"context"
	"time"

	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/services/consul"
	"github.com/tandem-serve/tandem/services/discovery"
)

// peersKnown reports whether the worker has its first view of the prefill
// workers it calls (always, for a worker that calls none). Before, a request the
// router sends with a prefill worker's id would not find it and fall back
// (unknown_prefill_worker), although the whole deployment said SERVING.
func (s *Service) peersKnown() bool {
	if s.dir == nil || s.Mode != workerv1.WorkerMode_WORKER_MODE_DECODE {
		return true
	}
	select {
	case <-s.dir.Ready():
		return true
	default:
		return false
	}
}

// serveOncePeersKnown turns health SERVING once the first view of the prefill
// workers is there (unless a drain asked otherwise meanwhile), saying every few
// seconds whom it waits for.
func (s *Service) serveOncePeersKnown(ctx context.Context) {
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.dir.Ready():
			if ctx.Err() != nil {
				return // shutting down: the drain says NOT_SERVING
			}
			s.refreshServing()
			s.log.Info("prefill workers known; serving", "prefill_workers", len(s.dir.Workers()))
			return
		case <-tick.C:
			if s.peersKnown() {
				continue // Ready too: the other case says so
			}
			s.log.Warn("not serving yet: waiting for the first view of the prefill workers", "awaiting", s.dir.Awaiting())
		}
	}
}

// instances are Consul's passing prefill workers as the directory takes them.
func instances(is []consul.Instance) []discovery.Instance {
	out := make([]discovery.Instance, len(is))
	for i, in := range is {
		out[i] = discovery.Instance{ID: in.ID, Addr: in.Addr, KVPort: in.Meta["kv_transfer_port"], LendsPrefill: in.Meta["lends_prefill"] == "true"}
		if id := in.Meta["worker_id"]; id != "" {
			// A lender's registration as a prefill worker has an id of its own;
			// the router names it by its worker id.
			out[i].ID = id
		}
	}
	return out
}
