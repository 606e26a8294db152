package workersvc

import (
	"context"
	"log/slog"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/handoff"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
	"github.com/tandem-serve/tandem/router"
	"github.com/tandem-serve/tandem/services/rpc"
)

// prefillers resolves prefill worker ids (prefill workers, and aggregated workers
// that lend prefill) through the worker's directory and
// calls them over the process's peer connections, dialled the first time a
// request goes to that worker and closed when idle: a worker's KV transfer port
// when it has one (with its main port behind it), else its main port.
type prefillers struct {
	dir   members
	conns *rpc.Conns
	log   *slog.Logger

	mu     sync.Mutex
	warned map[string]bool // KV addresses found unreachable
}

var _ decode.Prefillers = (*prefillers)(nil)

// members is what prefillers reads of discovery (a *discovery.Directory).
type members interface {
	ByID(id string) (router.Worker, bool)
	Workers() []router.Worker
	// Refresh asks the static addresses again who they are.
	Refresh()
}

func newPrefillers(dir members, conns *rpc.Conns, log *slog.Logger) *prefillers {
	return &prefillers{dir: dir, conns: conns, log: log}
}

func (p *prefillers) Client(id string) (handoff.Client, bool) {
	w, ok := p.dir.ByID(id)
	if !ok || !w.ServesPrefill() {
		return nil, false
	}
	main, err := p.conns.Get(w.Address)
	if err != nil {
		return nil, false
	}
	if w.KVAddress == "" {
		return handoff.GRPCClient(main), true
	}
	kv, err := p.conns.Get(w.KVAddress, handoff.DialOptions()...)
	if err != nil {
		return nil, false
	}
	return &kvThenMain{p: p, addr: w.KVAddress, kv: handoff.GRPCClient(kv), main: handoff.GRPCClient(main)}, true
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
	// The worker may have restarted on another KV port: the next request finds out.
	c.p.dir.Refresh()
	if first && c.p.log != nil {
		c.p.log.WarnContext(ctx, "KV transfer port unreachable; calling Prefill on the main port (slower). Check that it is open, or --kv-advertise-port",
			"kv_address", c.addr, "error", err)
	}
	return c.main.Prefill(ctx, in)
}

// Failed asks the static prefill workers again who they are and whether they
// serve: a worker whose engine died says so, and is offered no more.
func (p *prefillers) Failed(string) { p.dir.Refresh() }

func (p *prefillers) IDs() []string {
	var ids []string
	for _, w := range p.dir.Workers() {
		// A draining worker refuses new prefills (the ladder then moves on); it
		// is not offered here when the directory already knows it drains.
		if w.ServesPrefill() && !w.Draining {
			ids = append(ids, w.ID)
		}
	}
	return ids
}
