package workersvc

import (
	"context"
	"log/slog"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/handoff"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/router"
	"github.com/tandem-serve/tandem/services/discovery"
)

// prefillers resolves prefill worker ids through discovery, dialling each address
// once: a worker's KV transfer port when it has one (with its main port behind it),
// else its main port.
type prefillers struct {
	tracker members
	dial    discovery.Dialer // main ports
	dialKV  discovery.Dialer // KV transfer ports
	log     *slog.Logger

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn // by address
	warned map[string]bool             // KV addresses found unreachable
}

var _ decode.Prefillers = (*prefillers)(nil)

// members is what prefillers reads of discovery (a *discovery.Tracker).
type members interface {
	ByID(id string) (router.Worker, bool)
	Workers() []router.Worker
}

func (p *prefillers) Client(id string) (handoff.Client, bool) {
	w, ok := p.tracker.ByID(id)
	if !ok || w.Mode != workerv1.WorkerMode_WORKER_MODE_PREFILL {
		return nil, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	main, err := p.conn(w.Address, p.dial)
	if err != nil {
		return nil, false
	}
	if w.KVAddress == "" {
		return handoff.GRPCClient(main), true
	}
	kv, err := p.conn(w.KVAddress, p.dialKV)
	if err != nil {
		return nil, false
	}
	return &kvThenMain{p: p, addr: w.KVAddress, kv: handoff.GRPCClient(kv), main: handoff.GRPCClient(main)}, true
}

// conn returns the connection to addr, dialling it the first time. A new address
// is the moment to close connections to addresses no member has any more (workers
// that left, or came back on another port or under another id). p.mu is held.
func (p *prefillers) conn(addr string, dial discovery.Dialer) (*grpc.ClientConn, error) {
	if cc, ok := p.conns[addr]; ok {
		return cc, nil
	}
	cc, err := dial(addr)
	if err != nil {
		return nil, err
	}
	p.conns[addr] = cc
	live := map[string]bool{}
	for _, w := range p.tracker.Workers() {
		live[w.Address], live[w.KVAddress] = true, true
	}
	for a, old := range p.conns {
		if !live[a] && a != addr {
			_ = old.Close()
			delete(p.conns, a)
		}
	}
	return cc, nil
}

// kvThenMain calls Prefill on a worker's KV transfer port and, when that port
// cannot be reached at all, on its main port, which serves the same method: a KV
// port that a firewall or a port mapping hides costs handoff speed, not every
// remote prefill.
type kvThenMain struct {
	p        *prefillers
	addr     string
	kv, main handoff.Client
}

func (c *kvThenMain) Prefill(ctx context.Context, in *prefillv1.PrefillRequest) (handoff.Stream, error) {
	s, err := c.kv.Prefill(ctx, in)
	if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
		return s, err
	}
	c.p.mu.Lock()
	first := !c.p.warned[c.addr]
	if c.p.warned == nil {
		c.p.warned = map[string]bool{}
	}
	c.p.warned[c.addr] = true
	c.p.mu.Unlock()
	if first && c.p.log != nil {
		c.p.log.WarnContext(ctx, "KV transfer port unreachable; calling Prefill on the main port (slower). Check that it is open, or --kv-advertise-port",
			"kv_address", c.addr, "error", err)
	}
	return c.main.Prefill(ctx, in)
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
