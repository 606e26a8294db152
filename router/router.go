// Package router picks the decode worker for each request and ranks the prefill
// workers it may use. It is fed worker membership by discovery and worker load by
// the workers' event streams; it opens no connections itself.
package router

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	"github.com/tandem-serve/tandem/proto/tandem/router/v1/routerv1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// Worker is a worker known to discovery.
type Worker struct {
	ID      string
	Address string
	Mode    workerv1.WorkerMode
}

// Membership lists the healthy workers now.
type Membership interface {
	Workers() []Worker
}

// Config holds the routing parameters.
type Config struct {
	BlockSize int
}

// Router implements RouterService.
type Router struct {
	cfg     Config
	members Membership
	rng     *rand.Rand

	mu      sync.Mutex
	load    map[string]*workerv1.Load
	pending map[string]int // requests routed since the worker's last load report

	routed *prometheus.CounterVec
}

var _ routerv1connect.RouterServiceHandler = (*Router)(nil)

// New returns a router over members. rng breaks ties; pass a seeded one in tests.
func New(cfg Config, members Membership, rng *rand.Rand, reg prometheus.Registerer) *Router {
	r := &Router{
		cfg: cfg, members: members, rng: rng,
		load: map[string]*workerv1.Load{}, pending: map[string]int{},
		routed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_router_routed_total", Help: "Requests routed, by decode worker.",
		}, []string{"worker"}),
	}
	reg.MustRegister(r.routed)
	return r
}

// ObserveLoad records a worker's reported load.
func (r *Router) ObserveLoad(workerID string, l *workerv1.Load) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.load[workerID] = l
	r.pending[workerID] = 0
}

// Forget drops what the router knows of a worker that left.
func (r *Router) Forget(workerID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.load, workerID)
	delete(r.pending, workerID)
}

func canDecode(m workerv1.WorkerMode) bool {
	return m == workerv1.WorkerMode_WORKER_MODE_DECODE || m == workerv1.WorkerMode_WORKER_MODE_AGGREGATED
}

// Route picks the least-loaded decode worker, counting the requests it has sent
// there since the worker last reported, so a burst does not all land on one.
func (r *Router) Route(_ context.Context, req *connect.Request[routerv1.RouteRequest]) (*connect.Response[routerv1.RouteResponse], error) {
	m := req.Msg
	if m.GetPromptTokens() == 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("prompt_tokens: must be positive"))
	}
	if bs := m.GetBlockSize(); bs != 0 && r.cfg.BlockSize != 0 && int(bs) != r.cfg.BlockSize {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("block_size: %d, the workers use %d", bs, r.cfg.BlockSize))
	}
	workers := r.members.Workers()
	r.mu.Lock()
	defer r.mu.Unlock()
	var (
		best     []Worker
		bestCost = -1.0
		resp     = &routerv1.RouteResponse{}
		expl     = &routerv1.Explanation{GateClass: "all"}
		prefills []*routerv1.RankedWorker
		n        int
	)
	for _, w := range workers {
		if slices.Contains(m.GetExcludeWorkerIds(), w.ID) {
			continue
		}
		l := r.load[w.ID]
		if w.Mode == workerv1.WorkerMode_WORKER_MODE_PREFILL {
			prefills = append(prefills, &routerv1.RankedWorker{
				Worker: proto(w), QueuedTokens: l.GetWaitingTokens(), Cost: float64(l.GetWaitingTokens()),
			})
			continue
		}
		if !canDecode(w.Mode) {
			continue
		}
		n++
		cost := float64(l.GetActiveBlocks()) + float64(l.GetRunningSequences()+l.GetWaitingSequences()) + float64(r.pending[w.ID])
		if m.GetExplain() {
			expl.Candidates = append(expl.Candidates, &routerv1.CandidateCost{
				Worker: proto(w), DecodeTerm: float64(l.GetActiveBlocks()),
				QueueTerm: float64(l.GetRunningSequences()+l.GetWaitingSequences()) + float64(r.pending[w.ID]), Cost: cost,
			})
		}
		switch {
		case bestCost < 0 || cost < bestCost:
			best, bestCost = []Worker{w}, cost
		case cost == bestCost:
			best = append(best, w)
		}
	}
	if len(best) == 0 {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("no decode worker is available"))
	}
	chosen := best[r.rng.IntN(len(best))]
	r.pending[chosen.ID]++
	r.routed.WithLabelValues(chosen.ID).Inc()
	slices.SortStableFunc(prefills, func(a, b *routerv1.RankedWorker) int { return cmp.Compare(a.QueuedTokens, b.QueuedTokens) })
	resp.DecodeWorker = proto(chosen)
	resp.PrefillWorkers = prefills
	resp.Reason = fmt.Sprintf("least loaded of %d decode workers (cost %.0f, %d tied)", n, bestCost, len(best))
	if m.GetExplain() {
		for _, c := range expl.Candidates {
			c.Chosen = c.Worker.GetId() == chosen.ID
		}
		resp.Explanation = expl
	}
	return connect.NewResponse(resp), nil
}

// ListWorkers returns the workers discovery knows now.
func (r *Router) ListWorkers(context.Context, *connect.Request[routerv1.ListWorkersRequest]) (*connect.Response[routerv1.ListWorkersResponse], error) {
	resp := &routerv1.ListWorkersResponse{}
	for _, w := range r.members.Workers() {
		resp.Workers = append(resp.Workers, proto(w))
	}
	return connect.NewResponse(resp), nil
}

func proto(w Worker) *routerv1.Worker {
	return &routerv1.Worker{Id: w.ID, Address: w.Address, Mode: w.Mode}
}
