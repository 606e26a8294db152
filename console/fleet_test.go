package console

import (
	"testing"

	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// The console shows which lenders the router keeps from decoding while they
// lend, and whether it does so at all (lenders_prefill_first).
func TestFleetOfShowsLending(t *testing.T) {
	f := fleetOf(&routerv1.WatchFleetResponse{
		Params: &routerv1.RoutingParams{IslGate: true, LendersPrefillFirst: true},
		Workers: []*routerv1.FleetWorker{
			{Worker: &routerv1.Worker{Id: "lender-a", Mode: workerv1.WorkerMode_WORKER_MODE_AGGREGATED},
				Load: &workerv1.Load{LentWaitingTokens: 2048}, WithheldFromDecode: true},
			{Worker: &routerv1.Worker{Id: "lender-b", Mode: workerv1.WorkerMode_WORKER_MODE_AGGREGATED}, Load: &workerv1.Load{}},
		},
	})
	if f.Router == nil || !f.Router.LendersPrefillFirst {
		t.Errorf("router policy %+v: want lenders_prefill_first on", f.Router)
	}
	if len(f.Workers) != 2 || !f.Workers[0].Lending || f.Workers[1].Lending {
		t.Errorf("workers %+v: want lender-a lending and lender-b not", f.Workers)
	}
}

// The console shows the planner's plan the router applies (its shape, reason,
// pin and switches) and each lender's role; without a plan, none.
func TestFleetOfShowsThePlan(t *testing.T) {
	if f := fleetOf(&routerv1.WatchFleetResponse{}); f.Planner != nil {
		t.Errorf("no plan: %+v", f.Planner)
	}
	f := fleetOf(&routerv1.WatchFleetResponse{
		Workers: []*routerv1.FleetWorker{
			{Worker: &routerv1.Worker{Id: "lender-a", Mode: workerv1.WorkerMode_WORKER_MODE_AGGREGATED}, Role: "prefill"},
		},
		Planner: &routerv1.PlannerView{
			Source: "consul", DecidedUnixMs: 1796140000000, Reason: "pinned by the operator", PrefillWorkers: 1, DecodeWorkers: 2,
			IslThreshold: 1024, Roles: map[string]string{"lender-a": "prefill"}, Pinned: true,
			Pin: &routerv1.PlannerPin{Prefill: 1, IslThreshold: 1024}, ArrivalRate: 12.34567, ProjectedCapacity: 200, BestCapacity: 224,
			Switches: []*routerv1.PlannerSwitch{{AtUnixMs: 1796139990000, Reason: "a 20% gain", Roles: map[string]string{"lender-a": "prefill"}, IslThreshold: 1024}},
		},
	})
	p := f.Planner
	if p == nil || p.Source != "consul" || p.Reason != "pinned by the operator" || p.PrefillWorkers != 1 || p.ISLThreshold != 1024 ||
		!p.Pinned || p.Pin == nil || p.Pin.Prefill != 1 || p.ArrivalRate != 12.346 || len(p.Switches) != 1 || p.Switches[0].Reason != "a 20% gain" ||
		p.Roles["lender-a"] != "prefill" {
		t.Errorf("planner %+v: want the router's plan", p)
	}
	if f.Workers[0].Role != "prefill" {
		t.Errorf("lender's role %q, want prefill", f.Workers[0].Role)
	}
}
