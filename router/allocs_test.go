package router

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/internal/testutil"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// A decision allocates its reply, its ranked prefill workers' messages (none
// without prefill workers) and its reason, nothing else: what a router allocates
// per request is what sets how often the GC runs beside the decisions. Both paths (by load order, and the full pass at a temperature), with
// more prefill workers than a reply names and workers holding parts of the prompt.
func TestRouteAllocations(t *testing.T) {
	for _, temperature := range []float64{0, 0.5} {
		p := DefaultParams()
		p.Temperature = temperature
		r, err := New(Config{BlockSize: 16, Params: p}, rand.New(rand.NewPCG(1, 2)), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(3, 4))
		prompts := testutil.Chains(rng, 16, 32)
		for i := range 60 {
			w := Worker{ID: fmt.Sprintf("w%02d", i), Mode: workerv1.WorkerMode_WORKER_MODE_DECODE, Policy: "threshold", TotalBlocks: 1 << 12, Fingerprint: "m"}
			if i%4 == 0 {
				w.Mode, w.Policy = workerv1.WorkerMode_WORKER_MODE_PREFILL, ""
			}
			held := prompts[rng.IntN(len(prompts))]
			msg := &workerv1.WatchEventsResponse{Incarnation: "1", Snapshot: &workerv1.Snapshot{BlockHashes: held[:rng.IntN(len(held))]},
				Load: &workerv1.Load{TotalBlocks: 1 << 12, FreeBlocks: 1 << 11, ActiveBlocks: uint32(i % 7)}}
			if err := r.Update(w, msg); err != nil {
				t.Fatal(err)
			}
		}
		reqs := make([]*connect.Request[routerv1.RouteRequest], len(prompts))
		for i, h := range prompts {
			reqs[i] = connect.NewRequest(&routerv1.RouteRequest{PromptTokens: uint32(len(h) * 16), BlockHashes: h, BlockSize: 16, ModelFingerprint: "m"})
		}
		ctx, i := context.Background(), 0
		route := func() {
			resp, err := r.Route(ctx, reqs[i%len(reqs)])
			if err != nil {
				t.Fatal(err)
			}
			if n := len(resp.Msg.GetPrefillWorkers()); n != MaxRankedPrefill {
				t.Fatalf("%d prefill workers named, want %d", n, MaxRankedPrefill)
			}
			i++
		}
		for range 100 {
			route() // scratch grown
		}
		if got := testing.AllocsPerRun(500, route); got > 3 {
			t.Errorf("temperature %g: %.1f allocations per decision, want at most 3 (the reply, its ranked workers, its reason)", temperature, got)
		}
	}
}
