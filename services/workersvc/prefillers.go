package workersvc

import (
	"sync"

	"google.golang.org/grpc"

	"github.com/tandem-serve/tandem/decode"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/router"
	"github.com/tandem-serve/tandem/services/discovery"
)

// prefillers resolves prefill worker ids through the tracker, dialling each known
// address once: a worker's KV transfer port when it has one, else its main port.
type prefillers struct {
	tracker members
	dial    discovery.Dialer // main ports
	dialKV  discovery.Dialer // KV transfer ports

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn // by address
	addrOf map[string]string           // worker id -> the address last dialled for it
}

var _ decode.Prefillers = (*prefillers)(nil)

// members is what prefillers reads of discovery (a *discovery.Tracker).
type members interface {
	ByID(id string) (router.Worker, bool)
	Workers() []router.Worker
}

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
	if old, ok := p.addrOf[id]; ok && old != addr {
		// The worker restarted elsewhere (a new KV transfer port is the usual
		// case): the connection to where it was serves nobody now.
		p.forget(id, old)
	}
	cc, ok := p.conns[addr]
	if !ok {
		var err error
		if cc, err = dial(addr); err != nil {
			return nil, false
		}
		p.conns[addr] = cc
	}
	if p.addrOf == nil {
		p.addrOf = map[string]string{}
	}
	p.addrOf[id] = addr
	return prefillv1.NewPrefillServiceClient(cc), true
}

// forget drops id's record of addr and closes the connection to addr unless
// another worker still uses it. p.mu is held.
func (p *prefillers) forget(id, addr string) {
	delete(p.addrOf, id)
	for _, a := range p.addrOf {
		if a == addr {
			return
		}
	}
	if cc, ok := p.conns[addr]; ok {
		_ = cc.Close()
		delete(p.conns, addr)
	}
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
