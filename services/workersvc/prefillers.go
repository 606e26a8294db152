package workersvc

import (
	"sync"

	"google.golang.org/grpc"

	"github.com/tandem-serve/tandem/decode"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/services/discovery"
)

// prefillers resolves prefill worker ids through the tracker, dialling each known
// address once: a worker's KV transfer port when it has one, else its main port.
type prefillers struct {
	tracker *discovery.Tracker
	dial    discovery.Dialer // main ports
	dialKV  discovery.Dialer // KV transfer ports

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

var _ decode.Prefillers = (*prefillers)(nil)

func (p *prefillers) Client(id string) (prefillv1.PrefillServiceClient, bool) {
	w, ok := p.tracker.ByID(id)
	if !ok || w.Mode != workerv1.WorkerMode_WORKER_MODE_PREFILL {
		return nil, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	addr, dial := w.Address, p.dial
	if w.KVAddress != "" {
		addr, dial = w.KVAddress, p.dialKV
	}
	cc, ok := p.conns[addr]
	if !ok {
		var err error
		if cc, err = dial(addr); err != nil {
			return nil, false
		}
		p.conns[addr] = cc
	}
	return prefillv1.NewPrefillServiceClient(cc), true
}

func (p *prefillers) IDs() []string {
	var ids []string
	for _, w := range p.tracker.Workers() {
		// A draining worker still answers a router that suggests it; it is just not
		// picked here.
		if w.Mode == workerv1.WorkerMode_WORKER_MODE_PREFILL && !w.Draining {
			ids = append(ids, w.ID)
		}
	}
	return ids
}

func (p *prefillers) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cc := range p.conns {
		_ = cc.Close()
	}
}
