package discovery

import (
	"context"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/router"
)

// Directory is the membership of the workers of one mode that a process calls
// now and then (a decode worker's prefill workers), kept without a connection to
// any of them. The Tracker keeps an event stream open to every worker, which the
// router needs for its KV index and load; a decode worker needs only to turn the
// worker id the router suggests into an address, and the load it decides on comes
// in the route reply. With a stream per pair, D decode workers and P prefill
// workers held P x D connections whether they ever handed KV over or not.
//
// Workers come from Consul's catalog (SetInstances: id, address and KV transfer
// port from the registration, no call at all) and from static addresses, each
// asked once who it is (WorkerService.Info, one unary call). A static address is
// asked again when someone looks up an id the directory does not know (a worker
// restarted under a new id) or reports it stale (Refresh), at most once a second.
type Directory struct {
	mode  workerv1.WorkerMode
	info  InfoFunc
	log   *slog.Logger
	retry time.Duration // first wait after a static address did not answer

	mu      sync.Mutex
	ctx     context.Context   // of the last SetStatic: re-asking runs under it
	static  map[string]*entry // by address
	catalog map[string]router.Worker
	// Ready: every static address set so far has answered once, and Consul once
	// when it is expected.
	ready         chan struct{}
	awaitCatalog  bool
	pendingStatic int
	lastAsk       time.Time
}

type entry struct {
	w       router.Worker // ID empty until it answered
	asking  bool
	counted bool // has answered once (counted in pendingStatic)
	cancel  context.CancelFunc
}

// InfoFunc asks the worker at addr who it is.
type InfoFunc func(ctx context.Context, addr string) (*workerv1.WorkerInfo, error)

// NewDirectory returns an empty directory of the workers in mode. With
// awaitCatalog it is Ready only once SetInstances has been called too.
func NewDirectory(mode workerv1.WorkerMode, info InfoFunc, awaitCatalog bool, log *slog.Logger) *Directory {
	return &Directory{mode: mode, info: info, log: log, retry: 250 * time.Millisecond,
		static: map[string]*entry{}, catalog: map[string]router.Worker{}, ready: make(chan struct{}), awaitCatalog: awaitCatalog}
}

// Ready is closed once the directory has its first view: every static address
// given so far has said who it is, and, when awaited, Consul has answered once
// (with however many workers). A worker that calls these peers should not serve
// before: its first requests would find the router's suggestion unknown.
func (d *Directory) Ready() <-chan struct{} { return d.ready }

// Awaiting lists the static addresses that have not answered yet, and "consul"
// when Consul has not.
func (d *Directory) Awaiting() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for a, e := range d.static {
		if !e.counted {
			out = append(out, a)
		}
	}
	sort.Strings(out)
	if d.awaitCatalog {
		out = append(out, "consul")
	}
	return out
}

// SetStatic makes addrs the static addresses, asking each new one who it is
// (again and again, with backoff, until it answers or ctx ends).
func (d *Directory) SetStatic(ctx context.Context, addrs []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ctx = ctx
	want := map[string]bool{}
	for _, a := range addrs {
		want[a] = true
		if _, ok := d.static[a]; ok {
			continue
		}
		e := &entry{}
		d.static[a] = e
		d.pendingStatic++
		d.askLocked(a, e, true)
	}
	for a, e := range d.static {
		if !want[a] {
			if e.cancel != nil {
				e.cancel()
			}
			if !e.counted {
				d.pendingStatic--
			}
			delete(d.static, a)
		}
	}
	d.checkReadyLocked()
}

// SetInstances replaces the workers Consul lists (passing instances of the
// mode's service). KV transfer ports come from the kv_transfer_port metadata the
// workers register.
func (d *Directory) SetInstances(instances []Instance) {
	m := make(map[string]router.Worker, len(instances))
	for _, in := range instances {
		w := router.Worker{ID: in.ID, Address: in.Addr, Mode: d.mode}
		if in.LendsPrefill && d.mode == workerv1.WorkerMode_WORKER_MODE_PREFILL {
			// Listed as a prefill worker, but an aggregated one lending prefill.
			w.Mode, w.LendsPrefill = workerv1.WorkerMode_WORKER_MODE_AGGREGATED, true
		}
		if p, err := strconv.ParseUint(in.KVPort, 10, 16); err == nil && p != 0 {
			if kv, err := kvAddress(in.Addr, uint32(p)); err == nil {
				w.KVAddress = kv
			}
		}
		m[in.ID] = w
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.catalog = m
	d.awaitCatalog = false
	d.checkReadyLocked()
}

// Instance is a worker as a catalog lists it.
type Instance struct {
	ID, Addr string
	// KVPort is its kv_transfer_port metadata; empty without a KV transfer port.
	KVPort string
	// LendsPrefill: its lends_prefill metadata says it is an aggregated worker
	// serving Prefill too (--lend-prefill).
	LendsPrefill bool
}

// ByID finds a worker by id. A miss has every static address asked again (at most
// once a second): the worker may have restarted under a new id.
func (d *Directory) ByID(id string) (router.Worker, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if w, ok := d.catalog[id]; ok {
		return w, true
	}
	for _, e := range d.static {
		if e.w.ID == id {
			return e.w, true
		}
	}
	d.refreshLocked()
	return router.Worker{}, false
}

// Workers lists the workers known now, sorted by id; a worker both listed by
// Consul and given statically appears once.
func (d *Directory) Workers() []router.Worker {
	d.mu.Lock()
	defer d.mu.Unlock()
	seen := make(map[string]bool, len(d.catalog)+len(d.static))
	out := make([]router.Worker, 0, len(d.catalog)+len(d.static))
	for _, w := range d.catalog {
		seen[w.ID] = true
		out = append(out, w)
	}
	for _, e := range d.static {
		if e.w.ID != "" && !seen[e.w.ID] {
			seen[e.w.ID] = true
			out = append(out, e.w)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Refresh asks every static address again who it is (at most once a second), for
// a caller that found what the directory said stale (a KV transfer port that no
// longer answers).
func (d *Directory) Refresh() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.refreshLocked()
}

func (d *Directory) refreshLocked() {
	if d.ctx == nil || len(d.static) == 0 || time.Since(d.lastAsk) < time.Second {
		return
	}
	d.lastAsk = time.Now()
	for a, e := range d.static {
		d.askLocked(a, e, false)
	}
}

// watchDraining asks a draining (or unavailable) static worker who it is every
// second until it serves again or is no longer listed. Workers that serve are
// asked only when a caller finds them stale, so that D decode workers do not poll
// P prefill workers for ever.
func (d *Directory) watchDraining(addr string, e *entry) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		d.mu.Lock()
		ctx := d.ctx
		if d.static[addr] != e || !e.w.Draining || ctx == nil {
			d.mu.Unlock()
			return
		}
		d.askLocked(addr, e, false)
		d.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// askLocked starts asking addr who it is, unless a question is already out;
// persist keeps asking until it answers, else one try.
func (d *Directory) askLocked(addr string, e *entry, persist bool) {
	if e.asking || d.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(d.ctx)
	e.asking, e.cancel = true, cancel
	go d.ask(ctx, addr, e, persist)
}

func (d *Directory) ask(ctx context.Context, addr string, e *entry, persist bool) {
	wait := d.retry
	defer func() {
		d.mu.Lock()
		e.asking = false
		d.mu.Unlock()
	}()
	for {
		info, err := d.info(ctx, addr)
		if err == nil {
			d.learn(addr, e, info)
			return
		}
		if ctx.Err() != nil {
			return
		}
		if !persist {
			d.log.Warn("worker did not say who it is; keeping what was known", "peer_addr", addr, "error", err)
			return
		}
		if wait >= 2*time.Second {
			d.log.Warn("worker not reached yet; retrying", "peer_addr", addr, "error", err, "retry_in", wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func (d *Directory) learn(addr string, e *entry, info *workerv1.WorkerInfo) {
	w := router.Worker{ID: info.GetId(), Address: addr, Mode: info.GetMode(), Policy: info.GetPrefillPolicy(),
		TotalBlocks: int(info.GetTotalBlocks()), Fingerprint: info.GetLayout().GetModelFingerprint(), NoKVEvents: info.GetNoKvEvents(), LendsPrefill: info.GetLendsPrefill(),
		Draining: info.GetDraining() || info.GetUnavailable() != "", Unavailable: info.GetUnavailable()}
	if port := info.GetKvTransferPort(); port != 0 {
		kv, err := kvAddress(addr, port)
		if err != nil {
			d.log.Error("cannot make the KV transfer address", "peer_addr", addr, "error", err)
			return
		}
		w.KVAddress = kv
	}
	if w.Mode != d.mode && !(d.mode == workerv1.WorkerMode_WORKER_MODE_PREFILL && w.ServesPrefill()) {
		// Listed as one but is another (an aggregated worker without
		// --lend-prefill listed as a prefill worker): known, so that lookups say
		// why, never called.
		d.log.Error("static worker is not in the expected mode; it will not be called", "peer_addr", addr, "peer_id", w.ID,
			"mode", w.Mode.String(), "want", d.mode.String())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.static[addr] != e {
		return // no longer listed
	}
	if e.w != w {
		d.log.Info("worker known", "peer_addr", addr, "peer_id", w.ID, "mode", w.Mode.String(), "kv_transfer_addr", w.KVAddress,
			"draining", w.Draining, "unavailable", w.Unavailable)
	}
	if w.Draining && !e.w.Draining {
		// Nobody would ask again once it serves: watch it until it does.
		go d.watchDraining(addr, e)
	}
	e.w = w
	if !e.counted {
		e.counted = true
		d.pendingStatic--
		d.checkReadyLocked()
	}
}

func (d *Directory) checkReadyLocked() {
	if d.pendingStatic > 0 || d.awaitCatalog {
		return
	}
	select {
	case <-d.ready:
	default:
		close(d.ready)
	}
}
