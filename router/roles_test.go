package router_test

import (
	"math/rand/v2"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/router"
)

// A planner's role moves a lender at run time: as prefill it is ranked to
// prefill and never chosen to decode; as decode, chosen to decode and never
// ranked to prefill; with no role, both again. The traffic it routed is counted
// by effective prompt length.
func TestRolesMoveALenderAtRunTime(t *testing.T) {
	lender := router.Worker{ID: "agg-lender", Address: "10.0.0.5:7001", Mode: workerv1.WorkerMode_WORKER_MODE_AGGREGATED, LendsPrefill: true}
	start(t, []router.Worker{decodeA, prefillP, lender}, func(t *testing.T, r *router.Router, c client) {
		route := func() (decoded, ranked map[string]int) {
			decoded, ranked = map[string]int{}, map[string]int{}
			for _, explain := range []bool{false, true} {
				for range 100 {
					resp := mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: 64, Explain: explain})
					decoded[resp.GetDecodeWorker().GetId()]++
					for _, w := range resp.GetPrefillWorkers() {
						ranked[w.GetWorker().GetId()]++
					}
					for _, w := range []router.Worker{decodeA, lender} {
						observeLoad(t, r, w, &workerv1.Load{})
					}
				}
			}
			return decoded, ranked
		}
		r.TakeTraffic()
		r.SetRoles(map[string]router.Role{lender.ID: router.RolePrefill, decodeA.ID: router.RolePrefill})
		if d, k := route(); d[lender.ID] != 0 || k[lender.ID] == 0 || d[decodeA.ID] != 200 {
			t.Errorf("lender as prefill: decoded %v, ranked %v; want it ranked, never decoding (and the decode worker's own mode kept)", d, k)
		}
		r.SetRoles(map[string]router.Role{lender.ID: router.RoleDecode})
		if d, k := route(); d[lender.ID] == 0 || k[lender.ID] != 0 {
			t.Errorf("lender as decode: decoded %v, ranked %v; want it decoding, never ranked", d, k)
		}
		r.SetRoles(nil)
		if d, k := route(); d[lender.ID] == 0 || k[lender.ID] == 0 {
			t.Errorf("lender with no role: decoded %v, ranked %v; want both", d, k)
		}
		tr := r.TakeTraffic()
		if tr.Requests != 600 || tr.Count[6] != 600 || tr.PromptTokens != 600*64 {
			t.Errorf("traffic = %d requests, %d of 64-127 effective tokens, %d prompt tokens; want 600, 600, %d",
				tr.Requests, tr.Count[6], tr.PromptTokens, 600*64)
		}
		if tr := r.TakeTraffic(); tr.Requests != 0 {
			t.Errorf("traffic taken twice: %d requests the second time", tr.Requests)
		}
	})
}

// Roles that leave no worker to decode (the decode workers left) cost no
// request: the router drops them and the lender decodes.
func TestRolesThatLeaveNoDecoderAreDropped(t *testing.T) {
	lender := router.Worker{ID: "agg-lender", Address: "10.0.0.5:7001", Mode: workerv1.WorkerMode_WORKER_MODE_AGGREGATED, LendsPrefill: true}
	start(t, []router.Worker{prefillP, lender}, func(t *testing.T, r *router.Router, c client) {
		r.SetRoles(map[string]router.Role{lender.ID: router.RolePrefill})
		if got := mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: 64}).GetDecodeWorker().GetId(); got != lender.ID {
			t.Errorf("decoded by %q, want the lender once its role is dropped", got)
		}
		if roles := r.Roles(); len(roles) != 0 {
			t.Errorf("roles after a request found no decoder: %v, want none", roles)
		}
	})
}

// The fleet stream shows each lender's role and the plan it comes from, and
// follows a new plan; a worker whose mode fixes what it does shows none.
func TestWatchFleetShowsRolesAndThePlan(t *testing.T) {
	lender := router.Worker{ID: "agg-lender", Address: "10.0.0.5:7001", Mode: workerv1.WorkerMode_WORKER_MODE_AGGREGATED, LendsPrefill: true}
	r, err := router.New(router.Config{BlockSize: 16, Params: router.DefaultParams()}, rand.New(rand.NewPCG(1, 2)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []router.Worker{decodeA, lender} {
		join(t, r, w, nil)
	}
	recv := watchFleet(t, r, "grpc")
	if msg, err := recv(); err != nil || msg.GetPlanner() != nil || fleetWorker(msg, lender.ID).GetRole() != "" {
		t.Fatalf("before any plan: %v %v; want no plan and no role", msg, err)
	}
	r.SetRoles(map[string]router.Role{lender.ID: router.RolePrefill, decodeA.ID: router.RolePrefill})
	r.SetPlannerView(&routerv1.PlannerView{Source: "planner", Reason: "a reason", PrefillWorkers: 1, DecodeWorkers: 1, IslThreshold: 256})
	msg := nextUntil(t, recv, "the plan", func(m *routerv1.WatchFleetResponse) bool { return m.GetPlanner().GetReason() == "a reason" })
	if got := fleetWorker(msg, lender.ID).GetRole(); got != "prefill" {
		t.Errorf("lender's role %q, want prefill", got)
	}
	if got := fleetWorker(msg, decodeA.ID).GetRole(); got != "" {
		t.Errorf("decode worker's role %q, want none: its mode fixes what it does", got)
	}
	r.SetRoles(map[string]router.Role{lender.ID: router.RoleDecode})
	r.SetPlannerView(&routerv1.PlannerView{Source: "consul", Reason: "another"})
	msg = nextUntil(t, recv, "the new plan", func(m *routerv1.WatchFleetResponse) bool { return m.GetPlanner().GetReason() == "another" })
	if got := fleetWorker(msg, lender.ID).GetRole(); got != "decode" || msg.GetPlanner().GetSource() != "consul" {
		t.Errorf("after the new plan: role %q, source %q; want decode, consul", got, msg.GetPlanner().GetSource())
	}
}
