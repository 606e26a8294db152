package router_test

import (
	"testing"

	"connectrpc.com/connect"

	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/router"
)

func drain(t *testing.T, r *router.Router, w router.Worker, draining bool) {
	t.Helper()
	if err := r.Update(w, &workerv1.WatchEventsResponse{Incarnation: "1", Load: &workerv1.Load{}, Draining: draining}); err != nil {
		t.Fatal(err)
	}
}

// A worker whose event stream says it drains gets no new work, as if discovery
// had dropped it, and gets it again once undrained.
func TestRouteSkipsDrainingWorkers(t *testing.T) {
	start(t, threeWorkers, func(t *testing.T, r *router.Router, c client) {
		// Make the drained worker the obvious choice otherwise.
		observeLoad(t, r, decodeB, &workerv1.Load{ActiveBlocks: 100})
		drain(t, r, decodeA, true)
		for range 5 {
			if got := mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: 8}).GetDecodeWorker().GetId(); got != decodeB.ID {
				t.Fatalf("chose %s with %s draining", got, decodeA.ID)
			}
		}
		drain(t, r, prefillP, true)
		if resp := mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: 8}); len(resp.GetPrefillWorkers()) != 0 {
			t.Errorf("draining prefill worker still ranked: %v", resp.GetPrefillWorkers())
		}
		drain(t, r, decodeB, true)
		if _, err := c.route(rpctest.Context(t), &routerv1.RouteRequest{PromptTokens: 8}); rpctest.Code(err) != connect.CodeUnavailable {
			t.Fatalf("every decode worker draining: %v, want unavailable", err)
		}
		lw, err := r.ListWorkers(rpctest.Context(t), connect.NewRequest(&routerv1.ListWorkersRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range lw.Msg.GetWorkers() {
			if !w.GetDraining() {
				t.Errorf("ListWorkers shows %s not draining; every worker is", w.GetId())
			}
		}
		drain(t, r, decodeA, false)
		drain(t, r, prefillP, false)
		resp := mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: 8})
		if resp.GetDecodeWorker().GetId() != decodeA.ID || len(resp.GetPrefillWorkers()) != 1 {
			t.Errorf("after undraining: decode %s, prefill %v; want %s and %s", resp.GetDecodeWorker().GetId(), resp.GetPrefillWorkers(), decodeA.ID, prefillP.ID)
		}
	})
}
