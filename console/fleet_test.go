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
