package router_test

import (
	"testing"

	"github.com/tandem-serve/tandem/kvcache/blockhash"
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

// With lenders_prefill_first a lender decodes only while it lends nothing: lending
// (its prefill service holds a prompt for a decode worker), it is still ranked
// to prefill but chosen to decode no more, and as soon as its queue empties it
// is a decode candidate again. Turned off at run time, it decodes while lending.
func TestRouteLendersPrefillFirst(t *testing.T) {
	lender := router.Worker{ID: "agg-lender", Address: "10.0.0.5:7001", Mode: workerv1.WorkerMode_WORKER_MODE_AGGREGATED, LendsPrefill: true}
	start(t, []router.Worker{decodeA, prefillP, lender}, func(t *testing.T, r *router.Router, c client) {
		p := router.DefaultParams()
		p.ISLGate, p.LendersPrefillFirst = true, true
		if err := r.SetParams(p); err != nil {
			t.Fatal(err)
		}
		decodes := func(explain bool, lent uint64) (toLender int, rankedLender bool) {
			for range 100 {
				for _, w := range []router.Worker{decodeA, prefillP} {
					observeLoad(t, r, w, &workerv1.Load{})
				}
				observeLoad(t, r, lender, &workerv1.Load{LentWaitingTokens: lent}) // lent alone, no queue term
				resp := mustRoute(t, c, &routerv1.RouteRequest{PromptTokens: 64, Explain: explain})
				if resp.GetDecodeWorker().GetId() == lender.ID {
					toLender++
				}
				for _, w := range resp.GetPrefillWorkers() {
					rankedLender = rankedLender || w.GetWorker().GetId() == lender.ID
				}
			}
			return toLender, rankedLender
		}
		for _, explain := range []bool{false, true} { // the load order and the full pass
			if n, _ := decodes(explain, 0); n == 0 {
				t.Errorf("explain=%v: an idle lender was never chosen to decode in 100 short prompts", explain)
			}
			if n, ranked := decodes(explain, 2048); n != 0 || !ranked {
				t.Errorf("explain=%v: a lending lender decoded %d of 100 short prompts, ranked to prefill: %v; want 0 and ranked", explain, n, ranked)
			}
			if n, _ := decodes(explain, 0); n == 0 {
				t.Errorf("explain=%v: the lender's queue emptied but it was never chosen to decode again", explain)
			}
		}
		p.LendersPrefillFirst = false
		if err := r.SetParams(p); err != nil {
			t.Fatal(err)
		}
		if n, _ := decodes(false, 2048); n == 0 {
			t.Errorf("prefill first turned off: a lending lender was never chosen to decode")
		}
	})
}

// With lenders_prefill_first an idle lender decodes only a prompt whose part it
// does not hold is below the threshold: a 2,048-token prompt that a busy decode
// worker holds all but a block of is short for that worker (the gate scores the
// local class) but long for the lender, which would prefill all of it in the
// steps of the sequences it decodes. Without the rule the lender, far less
// loaded, would take it.
func TestRouteLenderDecodesOnlyShortUncached(t *testing.T) {
	prompt := tokens(7, 2048)
	hashes := blockhash.Hash(prompt, 16)
	lender := router.Worker{ID: "agg-lender", Address: "agg:1", Mode: workerv1.WorkerMode_WORKER_MODE_AGGREGATED, LendsPrefill: true, TotalBlocks: 4096}
	for _, first := range []bool{true, false} {
		p := router.DefaultParams()
		p.ISLGate, p.LendersPrefillFirst = true, first
		r := newRouter(t, p)
		busy := &workerv1.Load{TotalBlocks: 4096, FreeBlocks: 2000, ActiveBlocks: 2000}
		join(t, r, decodeWorker("d", "slo"), busy, hashes[:len(hashes)-1]...)
		idle := &workerv1.Load{TotalBlocks: 4096, FreeBlocks: 4096}
		join(t, r, lender, idle)
		for range 20 {
			got := routeTokens(t, r, prompt).GetDecodeWorker().GetId()
			if first && got != "d" {
				t.Fatalf("prefill first: a prompt of %d uncached tokens on the lender went to %s, want d, which holds all but a block", len(prompt), got)
			}
			if !first && got != lender.ID {
				t.Fatalf("without prefill first: went to %s, want the idle lender (the cheaper by the cost)", got)
			}
			// Routed blocks count as pending on the chosen worker: reset.
			observeLoad(t, r, decodeWorker("d", "slo"), busy)
			observeLoad(t, r, lender, idle)
		}
		// A short prompt the lender holds nothing of is its to take.
		if got := routeTokens(t, r, tokens(8, 64)).GetDecodeWorker().GetId(); got != lender.ID {
			t.Errorf("prefill first %v: a 64-token prompt went to %s, want the idle lender", first, got)
		}
	}
}
