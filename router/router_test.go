package router_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	"github.com/tandem-serve/tandem/proto/tandem/router/v1/routerv1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/router"
)

// join brings a worker into the router as its event stream would: a snapshot of
// its (empty) cache and its load.
func join(t *testing.T, r *router.Router, w router.Worker, l *workerv1.Load, hashes ...uint64) {
	t.Helper()
	if err := r.Update(w, &workerv1.WatchEventsResponse{Incarnation: "1", Snapshot: &workerv1.Snapshot{BlockHashes: hashes}, Load: l}); err != nil {
		t.Fatal(err)
	}
}

// observeLoad delivers a load report from w's event stream.
func observeLoad(t *testing.T, r *router.Router, w router.Worker, l *workerv1.Load) {
	t.Helper()
	if err := r.Update(w, &workerv1.WatchEventsResponse{Incarnation: "1", Load: l}); err != nil {
		t.Fatal(err)
	}
}

var (
	decodeA  = router.Worker{ID: "decode-a", Address: "10.0.0.1:7001", Mode: workerv1.WorkerMode_WORKER_MODE_DECODE}
	decodeB  = router.Worker{ID: "decode-b", Address: "10.0.0.2:7001", Mode: workerv1.WorkerMode_WORKER_MODE_AGGREGATED}
	prefillP = router.Worker{ID: "prefill-p", Address: "10.0.0.3:7001", Mode: workerv1.WorkerMode_WORKER_MODE_PREFILL}
)

type routeFunc func(ctx context.Context, req *routerv1.RouteRequest) (*routerv1.RouteResponse, error)

type client struct {
	name  string
	route routeFunc
}

// start serves a router over ws and calls fn once with a Connect client and once
// with a gRPC client, each against a router of its own.
func start(t *testing.T, ws []router.Worker, fn func(t *testing.T, r *router.Router, c client)) {
	t.Helper()
	for _, kind := range []string{"connect", "grpc"} {
		t.Run(kind, func(t *testing.T) {
			r, err := router.New(router.Config{BlockSize: 16, Params: router.DefaultParams()}, rand.New(rand.NewPCG(1, 2)), prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range ws {
				join(t, r, w, nil)
			}
			mux := http.NewServeMux()
			mux.Handle(routerv1connect.NewRouterServiceHandler(r))
			srv := rpctest.NewServer(t, mux)
			c := client{name: kind}
			switch kind {
			case "connect":
				// Route is unary: plain HTTP/1.1 is enough for the Connect protocol.
				tr := &http.Transport{}
				t.Cleanup(tr.CloseIdleConnections)
				cc := routerv1connect.NewRouterServiceClient(&http.Client{Transport: tr}, srv.URL)
				c.route = func(ctx context.Context, req *routerv1.RouteRequest) (*routerv1.RouteResponse, error) {
					resp, err := cc.Route(ctx, connect.NewRequest(req))
					if err != nil {
						return nil, err
					}
					return resp.Msg, nil
				}
			case "grpc":
				gc := routerv1.NewRouterServiceClient(rpctest.GRPCConn(t, srv))
				c.route = func(ctx context.Context, req *routerv1.RouteRequest) (*routerv1.RouteResponse, error) {
					return gc.Route(ctx, req)
				}
			}
			fn(t, r, c)
		})
	}
}

func mustRoute(t *testing.T, c client, req *routerv1.RouteRequest) *routerv1.RouteResponse {
	t.Helper()
	resp, err := c.route(rpctest.Context(t), req)
	if err != nil {
		t.Fatalf("Route: %v", err)
	}
	return resp
}

var threeWorkers = []router.Worker{prefillP, decodeA, decodeB}

func TestRouteNeverPicksPrefillWorker(t *testing.T) {
	start(t, threeWorkers, func(t *testing.T, r *router.Router, c client) {
		for i := range 20 {
			resp := mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: uint32(10 + i)})
			id := resp.GetDecodeWorker().GetId()
			if id != decodeA.ID && id != decodeB.ID {
				t.Fatalf("route %d chose %q, want one of the decode workers", i, id)
			}
			want := map[string]router.Worker{decodeA.ID: decodeA, decodeB.ID: decodeB}[id]
			if resp.GetDecodeWorker().GetAddress() != want.Address || resp.GetDecodeWorker().GetMode() != want.Mode {
				t.Fatalf("decode worker %v, want address %s mode %v", resp.GetDecodeWorker(), want.Address, want.Mode)
			}
			if len(resp.GetPrefillWorkers()) != 1 || resp.GetPrefillWorkers()[0].GetWorker().GetId() != prefillP.ID {
				t.Fatalf("prefill workers %v, want exactly %s", resp.GetPrefillWorkers(), prefillP.ID)
			}
		}
	})
}

func TestRouteAvoidsLoadedWorker(t *testing.T) {
	start(t, threeWorkers, func(t *testing.T, r *router.Router, c client) {
		for _, busy := range []router.Worker{decodeA, decodeB} {
			idle := decodeB
			if busy == decodeB {
				idle = decodeA
			}
			observeLoad(t, r, busy, &workerv1.Load{ActiveBlocks: 500, RunningSequences: 30})
			observeLoad(t, r, idle, &workerv1.Load{ActiveBlocks: 2, RunningSequences: 1})
			// A few routes in a row: the idle worker's pending count grows by one each
			// time, still far below the busy worker's load.
			for i := range 5 {
				if got := mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: 100}).GetDecodeWorker().GetId(); got != idle.ID {
					t.Fatalf("%s busy: route %d chose %s, want %s", busy.ID, i, got, idle.ID)
				}
			}
		}
	})
}

func TestRouteBurstSpreads(t *testing.T) {
	start(t, threeWorkers, func(t *testing.T, r *router.Router, c client) {
		counts := map[string]int{}
		const n = 20
		for range n {
			counts[mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: 64}).GetDecodeWorker().GetId()]++
		}
		// With no load reports, pending requests are the only load: they alternate.
		if counts[decodeA.ID] != n/2 || counts[decodeB.ID] != n/2 {
			t.Fatalf("a burst of %d routes landed %v, want %d on each decode worker", n, counts, n/2)
		}
		// A load report resets the pending count it covered.
		observeLoad(t, r, decodeA, &workerv1.Load{})
		observeLoad(t, r, decodeB, &workerv1.Load{ActiveBlocks: 3})
		if got := mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: 64}).GetDecodeWorker().GetId(); got != decodeA.ID {
			t.Fatalf("after load reports chose %s, want %s", got, decodeA.ID)
		}
	})
}

func TestRouteExclude(t *testing.T) {
	start(t, threeWorkers, func(t *testing.T, r *router.Router, c client) {
		// Make the excluded worker the obvious choice otherwise.
		observeLoad(t, r, decodeB, &workerv1.Load{ActiveBlocks: 100})
		for range 5 {
			got := mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: 8, ExcludeWorkerIds: []string{decodeA.ID}}).GetDecodeWorker().GetId()
			if got != decodeB.ID {
				t.Fatalf("chose %s with %s excluded", got, decodeA.ID)
			}
		}
		resp := mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: 8, ExcludeWorkerIds: []string{prefillP.ID}})
		if len(resp.GetPrefillWorkers()) != 0 {
			t.Errorf("excluded prefill worker still ranked: %v", resp.GetPrefillWorkers())
		}
		_, err := c.route(rpctest.Context(t), &routerv1.RouteRequest{PromptTokens: 8, ExcludeWorkerIds: []string{decodeA.ID, decodeB.ID}})
		if rpctest.Code(err) != connect.CodeUnavailable {
			t.Fatalf("every decode worker excluded: %v, want unavailable", err)
		}
	})
}

func TestRouteNoDecodeWorker(t *testing.T) {
	for name, ws := range map[string][]router.Worker{"none": nil, "prefill only": {prefillP}} {
		t.Run(name, func(t *testing.T) {
			start(t, ws, func(t *testing.T, r *router.Router, c client) {
				resp, err := c.route(rpctest.Context(t), &routerv1.RouteRequest{PromptTokens: 8})
				if rpctest.Code(err) != connect.CodeUnavailable {
					t.Fatalf("got %v, %v; want unavailable", resp, err)
				}
			})
		})
	}
}

func TestRouteExplain(t *testing.T) {
	start(t, threeWorkers, func(t *testing.T, r *router.Router, c client) {
		observeLoad(t, r, decodeA, &workerv1.Load{ActiveBlocks: 7, RunningSequences: 2})
		resp := mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: 32, Explain: true})
		cands := resp.GetExplanation().GetCandidates()
		if len(cands) != 2 {
			t.Fatalf("%d candidates, want the 2 decode workers: %v", len(cands), cands)
		}
		chosen := 0
		for _, cand := range cands {
			id := cand.GetWorker().GetId()
			if id == prefillP.ID {
				t.Errorf("prefill worker among decode candidates")
			}
			if cand.GetChosen() {
				chosen++
				if id != resp.GetDecodeWorker().GetId() {
					t.Errorf("candidate %s marked chosen, decode worker is %s", id, resp.GetDecodeWorker().GetId())
				}
			}
			if id == decodeA.ID && cand.GetCost() <= 0 {
				t.Errorf("loaded worker %s has cost %g", id, cand.GetCost())
			}
		}
		if chosen != 1 {
			t.Fatalf("%d candidates chosen, want exactly 1", chosen)
		}
		if resp.GetDecodeWorker().GetId() != decodeB.ID {
			t.Errorf("chose %s, want the idle %s", resp.GetDecodeWorker().GetId(), decodeB.ID)
		}
		// Without explain, no explanation.
		if e := mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: 32}).GetExplanation(); e != nil {
			t.Errorf("explanation without explain: %v", e)
		}
	})
}

func TestRouteInvalidArgument(t *testing.T) {
	start(t, threeWorkers, func(t *testing.T, r *router.Router, c client) {
		for _, tc := range []struct {
			req   *routerv1.RouteRequest
			field string
		}{
			{&routerv1.RouteRequest{}, "prompt_tokens"},
			{&routerv1.RouteRequest{PromptTokens: 5, BlockSize: 5000}, "block_size"},
			// The request's block size is the one the hashes are checked against:
			// 64 tokens make 2 full blocks of 32 (4 of 16).
			{&routerv1.RouteRequest{PromptTokens: 64, BlockSize: 32, BlockHashes: []uint64{1, 2, 3}}, "block_hashes"},
		} {
			_, err := c.route(rpctest.Context(t), tc.req)
			if rpctest.Code(err) != connect.CodeInvalidArgument {
				t.Fatalf("%v: got %v, want invalid_argument", tc.req, err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name %s", err, tc.field)
			}
		}
		// Any engine's block size is taken from the request (the model card's); the
		// router has no flag of its own to disagree with.
		mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: 5, BlockSize: 16})
		mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: 64, BlockSize: 32, BlockHashes: []uint64{1, 2}})
	})
}

// Idle prefill workers of equal cost take turns at the head of the ranking: by id
// alone the first would get every remote prefill while the other sat idle.
func TestRoutePrefillTiesShare(t *testing.T) {
	prefillQ := router.Worker{ID: "prefill-q", Address: "10.0.0.4:7001", Mode: workerv1.WorkerMode_WORKER_MODE_PREFILL}
	start(t, []router.Worker{prefillP, prefillQ, decodeA}, func(t *testing.T, r *router.Router, c client) {
		first := map[string]int{}
		const n = 200
		for range n {
			ws := mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: 64}).GetPrefillWorkers()
			if len(ws) != 2 {
				t.Fatalf("ranked %v, want both prefill workers", ws)
			}
			first[ws[0].GetWorker().GetId()]++
		}
		// Each is first with probability 1/2; fewer than 60 of 200 has odds below 1e-8.
		if first[prefillP.ID] < 60 || first[prefillQ.ID] < 60 {
			t.Errorf("first in the ranking over %d routes: %v; equal-cost workers should share it", n, first)
		}
		// A queue breaks the tie, every time.
		observeLoad(t, r, prefillP, &workerv1.Load{WaitingTokens: 512})
		for range 20 {
			if got := mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: 64}).GetPrefillWorkers()[0].GetWorker().GetId(); got != prefillQ.ID {
				t.Fatalf("with %s queued, %s ranked first", prefillP.ID, got)
			}
		}
	})
}

// A large prefill pool is named only in part, best first: the reply names
// router.MaxRankedPrefill of them, and idle ones of equal cost are a fair draw, so
// that every one of them gets work.
func TestRoutePrefillPoolRankedInPart(t *testing.T) {
	ws := []router.Worker{decodeA}
	for i := range 20 {
		ws = append(ws, router.Worker{ID: fmt.Sprintf("prefill-%02d", i), Address: fmt.Sprintf("10.0.1.%d:7000", i), Mode: workerv1.WorkerMode_WORKER_MODE_PREFILL})
	}
	start(t, ws, func(t *testing.T, r *router.Router, c client) {
		first := map[string]int{}
		for range 400 {
			got := mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: 64}).GetPrefillWorkers()
			if len(got) != router.MaxRankedPrefill {
				t.Fatalf("%d prefill workers named, want %d", len(got), router.MaxRankedPrefill)
			}
			first[got[0].GetWorker().GetId()]++
		}
		// Each is first with probability 1/20; one never first in 400 has odds
		// below 3e-8 for the 20.
		if len(first) != 20 {
			t.Errorf("first in the ranking over 400 routes: %v; all 20 idle workers should take turns", first)
		}
		// A worker with a queue is never named while 8 idle ones are there.
		observeLoad(t, r, ws[1], &workerv1.Load{WaitingTokens: 512})
		for range 50 {
			for _, p := range mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: 64}).GetPrefillWorkers() {
				if p.GetWorker().GetId() == ws[1].ID {
					t.Fatalf("%s, with a queue, named among idle workers", ws[1].ID)
				}
			}
		}
	})
}

// A prefill worker's queue is costed in the blocks of the request's model card,
// whatever block size the loads arrived under.
func TestRouteQueueInTheRequestsBlocks(t *testing.T) {
	start(t, []router.Worker{prefillP, decodeA}, func(t *testing.T, r *router.Router, c client) {
		p := router.DefaultParams()
		for _, bs := range []uint32{64, 16, 64} {
			observeLoad(t, r, prefillP, &workerv1.Load{WaitingTokens: 640})
			got := mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: 128, BlockSize: bs}).GetPrefillWorkers()
			if len(got) == 0 {
				t.Fatalf("block size %d: no prefill worker ranked", bs)
			}
			uncached := float64(128 / bs)
			want := p.PrefillWeight*uncached + p.QueueWeight*640/float64(bs)
			if c := got[0]; math.Abs(c.GetCost()-want) > 1e-9 || math.Abs(c.GetQueueCostPerToken()-p.QueueWeight/float64(bs)) > 1e-12 {
				t.Errorf("block size %d: cost %g, queue cost per token %g; want %g and %g", bs, c.GetCost(), c.GetQueueCostPerToken(),
					want, p.QueueWeight/float64(bs))
			}
		}
	})
}
