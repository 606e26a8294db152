package router_test

import (
	"testing"

	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/router"
)

// An aggregated worker that lends prefill (--lend-prefill) is ranked among the
// prefill workers with its decode load added to its cost: idle, it shares the
// first place with an idle prefill worker; busy decoding, it comes last. An
// aggregated worker that does not lend is never named, and the lender still
// serves its own traffic as a decode candidate. Chosen to decode, the lender is
// not named among its own prefill workers: it would send its prompt to itself.
func TestRoutePrefillLender(t *testing.T) {
	lender := router.Worker{ID: "agg-lender", Address: "10.0.0.5:7001", Mode: workerv1.WorkerMode_WORKER_MODE_AGGREGATED, LendsPrefill: true}
	start(t, []router.Worker{decodeA, decodeB, prefillP, lender}, func(t *testing.T, r *router.Router, c client) {
		for _, explain := range []bool{false, true} { // the load order and the full pass
			observeLoad(t, r, lender, &workerv1.Load{})
			first, decoded := map[string]int{}, map[string]int{}
			const n = 300
			for range n {
				resp := mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: 64, Explain: explain})
				ws := resp.GetPrefillWorkers()
				if resp.GetDecodeWorker().GetId() == lender.ID {
					if len(ws) != 1 || ws[0].GetWorker().GetId() != prefillP.ID {
						t.Fatalf("explain=%v: the lender decodes and is told to prefill on %v, want the prefill worker alone", explain, ws)
					}
				} else if len(ws) != 2 {
					t.Fatalf("explain=%v: ranked %v, want the prefill worker and the lender", explain, ws)
				}
				for _, w := range ws {
					if w.GetWorker().GetId() == decodeB.ID {
						t.Fatalf("explain=%v: %s, aggregated without --lend-prefill, ranked as a prefill worker", explain, decodeB.ID)
					}
				}
				first[ws[0].GetWorker().GetId()]++
				decoded[resp.GetDecodeWorker().GetId()]++
				// Routed blocks count as pending on the chosen decode worker: reset.
				for _, w := range []router.Worker{decodeA, decodeB, lender} {
					observeLoad(t, r, w, &workerv1.Load{})
				}
			}
			if shared := n - decoded[lender.ID]; first[lender.ID] < shared/3 || first[prefillP.ID]-decoded[lender.ID] < shared/3 {
				t.Errorf("explain=%v: first over %d routes (%d decoded by the lender): %v; an idle lender should share it with an idle prefill worker",
					explain, n, decoded[lender.ID], first)
			}
			if decoded[lender.ID] == 0 {
				t.Errorf("explain=%v: decode workers chosen %v; the lender should still take decode traffic", explain, decoded)
			}
			// Decoding, it ranks after the prefill worker, which has a queue the
			// lender's active blocks exceed.
			observeLoad(t, r, prefillP, &workerv1.Load{WaitingTokens: 16 * 8})
			observeLoad(t, r, lender, &workerv1.Load{ActiveBlocks: 40, RunningSequences: 6})
			for range 20 {
				ws := mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: 64, Explain: explain}).GetPrefillWorkers()
				if got := ws[len(ws)-1]; got.GetWorker().GetId() != lender.ID || got.GetCost() <= ws[0].GetCost() {
					t.Fatalf("explain=%v: ranked %v; a busy lender should come last, at a higher cost", explain, ws)
				}
			}
			observeLoad(t, r, prefillP, &workerv1.Load{})
		}
	})
}
