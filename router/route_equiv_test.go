package router

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/tandem-serve/tandem/internal/testutil"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// The fused scoring pass decides exactly as the pass-per-step routeRef did: same
// worker, same reason, same explanation, same rng draws, same threshold moves, over
// random fleets, loads, caches, exclusions, draining workers and parameters.
func TestRouteEqualsReference(t *testing.T) {
	modes := []workerv1.WorkerMode{
		workerv1.WorkerMode_WORKER_MODE_DECODE, workerv1.WorkerMode_WORKER_MODE_DECODE,
		workerv1.WorkerMode_WORKER_MODE_AGGREGATED, workerv1.WorkerMode_WORKER_MODE_PREFILL,
		workerv1.WorkerMode_WORKER_MODE_UNSPECIFIED,
	}
	policies := []string{"threshold", "cost", "always-local", "always-remote"}
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 77))
		p := DefaultParams()
		p.ISLGate = rng.IntN(3) > 0
		p.ISLAdaptive = rng.IntN(2) == 0
		p.ISLThreshold = 64 * (1 + rng.IntN(8))
		p.ISLHysteresis = 1 + rng.IntN(3)
		p.ISLMargin = float64(rng.IntN(5))
		if rng.IntN(2) == 0 {
			p.Temperature = 0.05 + rng.Float64()
		}
		p.QueueWeight = float64(rng.IntN(3))
		p.PrefillWeight = float64(rng.IntN(3))
		routers, regs := [2]*Router{}, [2]*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
		for i := range routers {
			r, err := New(Config{BlockSize: 16, Params: p}, rand.New(rand.NewPCG(seed, 5)), regs[i])
			if err != nil {
				t.Fatal(err)
			}
			routers[i] = r
		}
		both := func(f func(r *Router)) {
			for _, r := range routers {
				f(r)
			}
		}
		prompts := testutil.Chains(rng, 12, 8)
		var workers []Worker
		for i := range 3 + rng.IntN(12) {
			w := Worker{
				ID: fmt.Sprintf("w%02d", i), Address: fmt.Sprint(i), Mode: modes[rng.IntN(len(modes))],
				Policy: policies[rng.IntN(len(policies))], TotalBlocks: 1 << 10,
			}
			workers = append(workers, w)
			var hashes []uint64
			for range rng.IntN(4) {
				c := prompts[rng.IntN(len(prompts))]
				hashes = append(hashes, c[:rng.IntN(len(c)+1)]...)
			}
			both(func(r *Router) {
				if err := r.Update(w, &workerv1.WatchEventsResponse{Incarnation: "1", Snapshot: &workerv1.Snapshot{BlockHashes: hashes}}); err != nil {
					t.Fatal(err)
				}
			})
		}
		for step := range 80 {
			switch k := rng.IntN(10); {
			case k < 3:
				w := workers[rng.IntN(len(workers))]
				var l *workerv1.Load
				if rng.IntN(4) > 0 {
					l = &workerv1.Load{
						ActiveBlocks: uint32(rng.IntN(4)), WaitingTokens: uint64(16 * rng.IntN(3)),
						FreeBlocks: uint32(rng.IntN(12)), TotalBlocks: uint32(rng.IntN(2) * 64),
						RunningSequences: uint32(rng.IntN(4)),
					}
				} else {
					l = &workerv1.Load{}
				}
				draining := rng.IntN(6) == 0
				both(func(r *Router) {
					if err := r.Update(w, &workerv1.WatchEventsResponse{Incarnation: "1", Load: l, Draining: draining}); err != nil {
						t.Fatal(err)
					}
				})
			case k == 3 && len(workers) > 2:
				i := rng.IntN(len(workers))
				w := workers[i]
				workers = append(workers[:i], workers[i+1:]...)
				both(func(r *Router) { r.Leave(w) })
			default:
				c := prompts[rng.IntN(len(prompts))]
				n := rng.IntN(len(c) + 1)
				req := &routerv1.RouteRequest{PromptTokens: uint32(16*n + rng.IntN(20) + 1), BlockHashes: c[:n], Explain: rng.IntN(2) == 0}
				for range rng.IntN(3) {
					req.ExcludeWorkerIds = append(req.ExcludeWorkerIds, fmt.Sprintf("w%02d", rng.IntN(16)))
				}
				got, gotErr := routers[0].Route(context.Background(), connect.NewRequest(req))
				want, wantErr := routers[1].routeRef(context.Background(), connect.NewRequest(req))
				if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
					t.Fatalf("seed %d step %d: error %v, want %v", seed, step, gotErr, wantErr)
				}
				if gotErr == nil && !proto.Equal(got.Msg, want.Msg) {
					t.Fatalf("seed %d step %d:\n got %v\nwant %v", seed, step, got.Msg, want.Msg)
				}
				a, b := routers[0], routers[1]
				if a.threshold != b.threshold || a.evidence != b.evidence || a.rng.Uint64() != b.rng.Uint64() {
					t.Fatalf("seed %d step %d: threshold %d/%d evidence %d/%d, or the rng drifted", seed, step, a.threshold, b.threshold, a.evidence, b.evidence)
				}
				for id, st := range a.workers {
					if st.pendingBlocks != b.workers[id].pendingBlocks {
						t.Fatalf("seed %d step %d: %s pending %d, want %d", seed, step, id, st.pendingBlocks, b.workers[id].pendingBlocks)
					}
				}
			}
		}
		if got, want := gatherText(t, regs[0]), gatherText(t, regs[1]); got != want {
			t.Fatalf("seed %d: metrics\n%s\nwant\n%s", seed, got, want)
		}
	}
}

// gatherText renders every metric but the decision latency and path, without
// creation times: those are timing, and how the decision was made.
func gatherText(t *testing.T, reg *prometheus.Registry) string {
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, mf := range mfs {
		if mf.GetName() == "tandem_router_route_seconds" || mf.GetName() == "tandem_router_decision_path_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.Counter != nil {
				m.Counter.CreatedTimestamp = nil
			}
			if m.Histogram != nil {
				m.Histogram.CreatedTimestamp = nil
			}
		}
		out.WriteString(prototext.Format(mf))
	}
	return out.String()
}
