// Package router picks the decode worker for each request and ranks the prefill
// workers it may use. Its KV index (package kvindex) is built from the workers'
// own event streams; its candidates come from discovery. It opens no connections
// itself.
package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	"github.com/tandem-serve/tandem/proto/tandem/router/v1/routerv1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/router/kvindex"
)

// workerRef is a worker's slot in the KV index, by which the router keeps its
// per-worker arrays.
type workerRef = kvindex.Ref

// Worker is a worker known to discovery.
type Worker struct {
	ID      string
	Address string
	// KVAddress is where a prefill worker serves KV transfers; empty: Address.
	KVAddress string
	Mode      workerv1.WorkerMode
	// Policy is a decode worker's prefill policy ("threshold", "cost",
	// "always-local", "always-remote"); it decides the worker's gating classes.
	Policy string
	// TotalBlocks bounds what the index keeps for the worker.
	TotalBlocks int
	// Draining: the worker asked for nothing new (tandem drain) and finishes what
	// it has; its event stream says so.
	Draining bool
	// Unavailable says why the worker cannot serve now (its engine does not
	// answer); such a worker is Draining too.
	Unavailable string
	// Fingerprint names the weights it serves; a request for other weights skips it.
	Fingerprint string
	// NoKVEvents: its engine reports no KV events, so its cache is unknown and
	// it is scored on load alone.
	NoKVEvents bool
	// LendsPrefill: an aggregated worker that serves Prefill for decode workers
	// too; it is ranked among the prefill workers with its decode load added.
	LendsPrefill bool
}

// ServesPrefill: a prefill worker, or an aggregated worker that lends prefill.
func (w Worker) ServesPrefill() bool {
	return w.Mode == workerv1.WorkerMode_WORKER_MODE_PREFILL ||
		(w.Mode == workerv1.WorkerMode_WORKER_MODE_AGGREGATED && w.LendsPrefill)
}

// PrefillsLocally: an aggregated worker, or a decode worker that may prefill itself.
func (w Worker) PrefillsLocally() bool {
	return w.Mode == workerv1.WorkerMode_WORKER_MODE_AGGREGATED ||
		(w.Mode == workerv1.WorkerMode_WORKER_MODE_DECODE && w.Policy != "always-remote")
}

// Disaggregates: a decode worker that may hand prefill to a prefill worker.
func (w Worker) Disaggregates() bool {
	return w.Mode == workerv1.WorkerMode_WORKER_MODE_DECODE && w.Policy != "always-local"
}

func (w Worker) decodes() bool {
	return w.Mode == workerv1.WorkerMode_WORKER_MODE_DECODE || w.Mode == workerv1.WorkerMode_WORKER_MODE_AGGREGATED
}

// Config is the router's fixed configuration.
type Config struct {
	// BlockSize is the KV block size of a request that does not say its own;
	// requests carry the model card's (RouteRequest.block_size).
	BlockSize int
	Params    Params
	// Logger receives the decisions worth a line (the adaptive threshold's moves);
	// nil discards them.
	Logger *slog.Logger
}

// state is what the router knows of one worker.
type state struct {
	// The fields every request reads for every candidate come first, copied out of
	// w and load when those change, so that scoring a worker touches one cache line.
	ref  workerRef
	kind workerKind
	// excluded is the number of the request that excluded the worker, so that no
	// marks need clearing after it.
	excluded uint64
	// pendingBlocks were routed here since the worker's last load report, so a
	// burst between reports does not all land on one worker.
	pendingBlocks int
	// model numbers the worker's model fingerprint (Router.modelID), so that the
	// pass compares a number on this cache line rather than a string elsewhere.
	model               uint32
	waiting             uint64  // tokens; this and the next from load, zero without a report
	waitingBlocks       float64 // waiting / block size
	active, free, total uint32  // blocks
	running             uint32  // sequences decoding, from load
	lent                uint64  // tokens its prefill service holds for decode workers, from load
	// withheld: a lender out of the decode candidates while it lends
	// (Params.LendersPrefillFirst); decLend: a lender that is one.
	withheld, decLend bool

	w           Worker
	load        *workerv1.Load
	incarnation string
	lastEvent   uint64
	synced      bool               // a snapshot has been applied
	routed      prometheus.Counter // once it has been chosen
	skipped     prometheus.Counter // once it has been passed over for serving other weights
	routedTotal uint64             // requests routed here, for the fleet view
	// policy is a decode worker's prefill policy as its stream last said.
	policy *workerv1.PrefillPolicy
	// pos is its index in Router.order, which ties are drawn in.
	pos int
	// listed are the kinds by which it is in the load lists, with the keys it is
	// there under (order.go).
	listed            workerKind
	loadKey, slackKey float64
}

type workerKind uint8

const (
	kindDecodes workerKind = 1 << iota
	kindPrefill
	kindLocal  // Worker.PrefillsLocally
	kindDisagg // Worker.Disaggregates
)

func kindOf(w Worker) workerKind {
	var k workerKind
	if w.decodes() {
		k |= kindDecodes
	}
	if w.ServesPrefill() {
		k |= kindPrefill
	}
	if w.PrefillsLocally() {
		k |= kindLocal
	}
	if w.Disaggregates() {
		k |= kindDisagg
	}
	return k
}

func (st *state) setLoad(l *workerv1.Load, blockSize int) {
	st.load, st.pendingBlocks = l, 0
	st.active, st.waiting, st.free, st.total = l.GetActiveBlocks(), l.GetWaitingTokens(), l.GetFreeBlocks(), l.GetTotalBlocks()
	st.running = l.GetRunningSequences()
	st.lent = l.GetLentWaitingTokens()
	// Divided once here rather than for every candidate of every request (a
	// sixth of the scoring pass at 1,000 workers); the same division, so the same cost.
	st.waitingBlocks = float64(st.waiting) / float64(blockSize)
}

// Router implements RouterService.
type Router struct {
	cfg     Config
	metrics *metrics
	log     *slog.Logger

	mu        sync.Mutex
	params    Params
	rng       *rand.Rand
	ix        *kvindex.Index
	workers   map[string]*state
	order     []*state // workers sorted by id: a fixed order makes seeded runs repeatable
	threshold int      // the adaptive ISL threshold in force
	withheld  int      // lenders out of the decode candidates (state.withheld)
	decLend   int      // lenders that are decode candidates now (state.decLend)
	evidence  int      // signed count of consecutive adaptive signals
	byRef     []*state // by index slot
	requests  uint64   // numbers requests, for state.excluded
	gateCount [numClasses]prometheus.Counter
	// Scratch reused by every request.
	scratch  []int32
	hits     []int
	decoders []candidate
	prefills []candidate
	ranked   []ranked
	weights  []float64
	reason   []byte
	excluded []*state
	ties     []candidate
	merge    []candidate
	// lists keeps the workers ordered by load, for the decision by load order.
	lists loadOrder
	// modelCount counts the workers in order by model number.
	modelCount map[uint32]int
	// fullPass makes every decision by the pass over every worker: for the tests
	// that check the decision by load order against it.
	fullPass bool
	// fingerprints numbers the model fingerprints workers have reported, from 1.
	fingerprints map[string]uint32
	// fleetChanged is closed at the next change of the fleet view (fleet.go).
	fleetChanged chan struct{}
	stopping     chan struct{}
	stopOnce     sync.Once
	// blockSize is the last routed request's (the model card's), for WatchFleet.
	blockSize int
	// lockHeld, set only by tests, is told how long each Update held mu.
	lockHeld func(time.Duration)
	// roles are the planner's roles for lenders, by worker ID (roles.go).
	roles map[string]Role
	// plannerView is the plan the roles come from, for WatchFleet (roles.go).
	plannerView *routerv1.PlannerView
	// traffic is what was routed since the planner last took it (roles.go).
	traffic Traffic
}

var _ routerv1connect.RouterServiceHandler = (*Router)(nil)

// New returns a router. rng breaks ties and samples the softmax; pass a seeded one
// in tests.
func New(cfg Config, rng *rand.Rand, reg prometheus.Registerer) (*Router, error) {
	if cfg.BlockSize <= 0 {
		return nil, errors.New("router: BlockSize must be positive")
	}
	if err := cfg.Params.Validate(); err != nil {
		return nil, err
	}
	r := &Router{
		cfg: cfg, metrics: newMetrics(reg), params: cfg.Params, rng: rng,
		ix: kvindex.New(), workers: map[string]*state{}, threshold: cfg.Params.ISLThreshold,
		stopping: make(chan struct{}), blockSize: cfg.BlockSize, fingerprints: map[string]uint32{},
		modelCount: map[uint32]int{}, log: cfg.Logger,
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.metrics.threshold.Set(float64(r.threshold))
	return r, nil
}

// Params are the routing parameters in force.
func (r *Router) Params() Params {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.params
}

// SetParams replaces the routing parameters, if valid, from the next request on.
func (r *Router) SetParams(p Params) error {
	if err := p.Validate(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.params
	r.params, r.threshold, r.evidence = p, p.ISLThreshold, 0
	r.metrics.threshold.Set(float64(r.threshold))
	if p.LendersPrefillFirst != old.LendersPrefillFirst {
		for _, st := range r.order {
			r.setKind(st)
		}
	}
	if p.QueueWeight != old.QueueWeight || p.LendersPrefillFirst != old.LendersPrefillFirst {
		r.reindexAll() // the keys include the queue term; the lists, the kinds
	}
	r.fleetChange()
	return nil
}

// ErrResync says the router's view of a worker can no longer be trusted (an event
// gap, events before a snapshot, an over-full report): the caller must resubscribe,
// which brings a fresh snapshot.
var ErrResync = errors.New("router: worker's events need a fresh snapshot")

// modelID numbers a model fingerprint, giving a new one the next number. The
// numbers are never reused: there are as many as models a deployment has served.
func (r *Router) modelID(fp string) uint32 {
	id, ok := r.fingerprints[fp]
	if !ok {
		id = uint32(len(r.fingerprints) + 1)
		r.fingerprints[fp] = id
	}
	return id
}

// Update applies one message of a worker's event stream. On ErrResync the worker's
// entries are already dropped; they return with the next snapshot.
func (r *Router) Update(w Worker, msg *workerv1.WatchEventsResponse) error {
	// A snapshot's set is built before taking the lock, which every decision
	// waits for: under it, only the blocks that changed are applied.
	var snapBlocks kvindex.BlockSet
	if snap := msg.GetSnapshot(); snap != nil {
		snapBlocks = kvindex.NewBlockSet(snap.GetBlockHashes())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lockHeld != nil {
		// Deferred after Unlock, so run before it and after every other deferral.
		defer func(t0 time.Time) { r.lockHeld(time.Since(t0)) }(time.Now())
	}
	st := r.workers[w.ID]
	if st == nil {
		limit := w.TotalBlocks
		if limit <= 0 {
			limit = 1 << 20
		}
		st = &state{w: w, ref: r.ix.Add(limit)}
		r.workers[w.ID] = st
		for int(st.ref) >= len(r.byRef) {
			r.byRef = append(r.byRef, nil)
		}
		r.byRef[st.ref] = st
		i, _ := slices.BinarySearchFunc(r.order, w.ID, func(s *state, id string) int { return strings.Compare(s.w.ID, id) })
		r.order = slices.Insert(r.order, i, st)
		r.renumber(i)
		r.fleetChange()
	}
	defer r.noteFleet(st, msg, st.w, st.load)
	// Deferred after noteFleet, so run before it: every return below leaves the
	// lists in step with the worker's state.
	defer r.reindex(st)
	if st.model != 0 {
		r.modelCount[st.model]--
	}
	st.w, st.model = w, r.modelID(w.Fingerprint)
	r.modelCount[st.model]++
	if msg.GetDraining() {
		st.w.Draining = true
	}
	st.w.Unavailable = msg.GetUnavailable()
	if l := msg.GetLoad(); l != nil {
		st.setLoad(l, r.blockSize)
	}
	r.setKind(st)
	resync := func(reason string) error {
		r.ix.Clear(st.ref)
		st.synced = false
		r.metrics.resyncs.WithLabelValues(reason).Inc()
		r.metrics.indexBlocks.Set(float64(r.ix.Blocks()))
		return fmt.Errorf("%w: worker %s: %s", ErrResync, w.ID, reason)
	}
	if snap := msg.GetSnapshot(); snap != nil {
		if err := r.ix.Replace(st.ref, snapBlocks); err != nil {
			return resync("over_limit")
		}
		st.incarnation, st.lastEvent, st.synced = msg.GetIncarnation(), snap.GetLastEventId(), true
	} else if !st.synced {
		if len(msg.GetEvents()) > 0 {
			return resync("no_snapshot")
		}
	} else if msg.GetIncarnation() != st.incarnation {
		return resync("incarnation_changed")
	}
	for _, ev := range msg.GetEvents() {
		if ev.GetId() != st.lastEvent+1 {
			return resync("event_gap")
		}
		st.lastEvent = ev.GetId()
		r.metrics.events.Inc()
		switch k := ev.GetKind().(type) {
		case *workerv1.KVEvent_Stored:
			if err := r.ix.Store(st.ref, k.Stored.GetBlockHashes()); err != nil {
				return resync("over_limit")
			}
		case *workerv1.KVEvent_Removed:
			r.ix.Evict(st.ref, k.Removed.GetBlockHashes())
		case *workerv1.KVEvent_Cleared:
			r.ix.Clear(st.ref)
		}
	}
	r.metrics.indexBlocks.Set(float64(r.ix.Blocks()))
	return nil
}

// setKind works out what st is a candidate for now; r.mu is held, and the
// caller reindexes st. A draining worker keeps its index entries (it may be
// undrained) but is no candidate for anything, as if discovery had dropped it.
func (r *Router) setKind(st *state) {
	st.kind = kindOf(st.w)
	if st.w.Draining {
		st.kind = 0
	}
	st.kind = r.roleKind(st)
	withheld := r.params.LendersPrefillFirst && st.w.Mode == workerv1.WorkerMode_WORKER_MODE_AGGREGATED &&
		st.kind&kindPrefill != 0 && st.lent > 0
	if withheld {
		st.kind = kindPrefill
	}
	if decLend := st.w.LendsPrefill && st.kind&kindDecodes != 0; decLend != st.decLend {
		st.decLend = decLend
		if decLend {
			r.decLend++
		} else {
			r.decLend--
		}
	}
	if withheld != st.withheld {
		st.withheld = withheld
		if withheld {
			r.withheld++
		} else {
			r.withheld--
		}
		r.metrics.withheld.Set(float64(r.withheld))
	}
}

// Leave drops a worker that left discovery, and its index entries.
func (r *Router) Leave(w Worker) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.workers[w.ID]; st != nil {
		if st.withheld {
			r.withheld--
			r.metrics.withheld.Set(float64(r.withheld))
		}
		if st.decLend {
			r.decLend--
		}
		r.ix.Remove(st.ref)
		r.unlist(st)
		r.byRef[st.ref] = nil
		r.modelCount[st.model]--
		delete(r.workers, w.ID)
		i := slices.Index(r.order, st)
		r.order = slices.Delete(r.order, i, i+1)
		r.renumber(i)
		r.metrics.indexBlocks.Set(float64(r.ix.Blocks()))
		r.fleetChange()
	}
}

// renumber sets pos for the workers of order from i on.
func (r *Router) renumber(i int) {
	for ; i < len(r.order); i++ {
		r.order[i].pos = i
	}
}

// ListWorkers returns the workers the router can route to now.
func (r *Router) ListWorkers(context.Context, *connect.Request[routerv1.ListWorkersRequest]) (*connect.Response[routerv1.ListWorkersResponse], error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	resp := &routerv1.ListWorkersResponse{}
	for _, st := range r.order {
		resp.Workers = append(resp.Workers, workerProto(st.w))
	}
	return connect.NewResponse(resp), nil
}

func workerProto(w Worker) *routerv1.Worker {
	p := &routerv1.Worker{}
	setWorkerProto(p, w)
	return p
}

// setWorkerProto fills a zero Worker message, for callers that allocate many at once.
func setWorkerProto(p *routerv1.Worker, w Worker) {
	p.Id, p.Address, p.Mode, p.Draining, p.ModelFingerprint = w.ID, w.Address, w.Mode, w.Draining, w.Fingerprint
	p.Unavailable = w.Unavailable
}
