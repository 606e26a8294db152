package router

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/tandem-serve/tandem/internal/testutil"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// The decision by load order decides exactly as the pass over every worker: same
// worker, reason, prefill ranking, rng draws, threshold moves, pending blocks and
// metrics, over random fleets of decode, aggregated, prefill and draining workers
// with random caches, loads (idle, busy, full), exclusions, models and block sizes,
// while the parameters change under it (temperature above 0 and explanations take
// the full pass on both sides, and the lists must stay right through them).
func TestRouteByLoadEqualsFullPass(t *testing.T) {
	modes := []workerv1.WorkerMode{
		workerv1.WorkerMode_WORKER_MODE_DECODE, workerv1.WorkerMode_WORKER_MODE_DECODE,
		workerv1.WorkerMode_WORKER_MODE_AGGREGATED, workerv1.WorkerMode_WORKER_MODE_PREFILL,
		workerv1.WorkerMode_WORKER_MODE_PREFILL, workerv1.WorkerMode_WORKER_MODE_UNSPECIFIED,
	}
	policies := []string{"threshold", "cost", "always-local", "always-remote"}
	byLoad := 0
	for seed := range uint64(150) {
		rng := rand.New(rand.NewPCG(seed, 91))
		params := func() Params {
			p := DefaultParams()
			p.ISLGate = rng.IntN(3) > 0
			p.ISLAdaptive = rng.IntN(2) == 0
			p.ISLThreshold = 64 * (1 + rng.IntN(8))
			p.ISLHysteresis = 1 + rng.IntN(3)
			p.ISLMargin = float64(rng.IntN(5))
			if rng.IntN(4) == 0 {
				p.Temperature = 0.05 + rng.Float64()
			}
			// Weights that round (0.1, 0.3) as well as whole ones.
			p.QueueWeight = []float64{0, 1, 2, 0.1, 0.3}[rng.IntN(5)]
			p.PrefillWeight = []float64{0, 1, 2, 0.7}[rng.IntN(4)]
			p.LendersPrefillFirst = rng.IntN(2) == 0
			return p
		}
		p := params()
		routers, regs := [2]*Router{}, [2]*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
		for i := range routers {
			r, err := New(Config{BlockSize: 16, Params: p}, rand.New(rand.NewPCG(seed, 5)), regs[i])
			if err != nil {
				t.Fatal(err)
			}
			routers[i] = r
		}
		routers[1].fullPass = true
		both := func(f func(r *Router)) {
			for _, r := range routers {
				f(r)
			}
		}
		prompts := testutil.Chains(rng, 12, 8)
		mixedModels := rng.IntN(4) == 0
		newWorker := func(i int) Worker {
			w := Worker{
				ID: fmt.Sprintf("w%03d", i), Address: fmt.Sprint(i), Mode: modes[rng.IntN(len(modes))],
				Policy: policies[rng.IntN(len(policies))], TotalBlocks: 1 << 10, Fingerprint: "m1",
			}
			// Aggregated workers that lend prefill are both decode and prefill candidates.
			w.LendsPrefill = w.Mode == workerv1.WorkerMode_WORKER_MODE_AGGREGATED && rng.IntN(2) == 0
			if mixedModels && rng.IntN(5) == 0 {
				w.Fingerprint = "m2"
			}
			return w
		}
		randomLoad := func() *workerv1.Load {
			switch rng.IntN(5) {
			case 0:
				return &workerv1.Load{} // idle, no pool reported
			case 1:
				// Full or nearly: busy for long prompts.
				return &workerv1.Load{ActiveBlocks: uint32(rng.IntN(40)), FreeBlocks: uint32(rng.IntN(3)), TotalBlocks: 64,
					RunningSequences: uint32(rng.IntN(8))}
			}
			return &workerv1.Load{
				ActiveBlocks: uint32(rng.IntN(6)), WaitingTokens: uint64(8 * rng.IntN(5)),
				FreeBlocks: uint32(rng.IntN(16)), TotalBlocks: uint32(rng.IntN(2) * 64), RunningSequences: uint32(rng.IntN(4)),
				LentWaitingTokens: uint64(64 * rng.IntN(2)), // a lender lending, when prefill first takes it out
			}
		}
		var workers []Worker
		nextID := 0
		join := func() {
			w := newWorker(nextID)
			nextID++
			workers = append(workers, w)
			var hashes []uint64
			for range rng.IntN(3) {
				c := prompts[rng.IntN(len(prompts))]
				hashes = append(hashes, c[:rng.IntN(len(c)+1)]...)
			}
			var l *workerv1.Load
			if rng.IntN(3) > 0 {
				l = randomLoad()
			}
			both(func(r *Router) {
				if err := r.Update(w, &workerv1.WatchEventsResponse{Incarnation: "1", Snapshot: &workerv1.Snapshot{BlockHashes: hashes}, Load: l}); err != nil {
					t.Fatal(err)
				}
			})
		}
		for range 5 + rng.IntN(60) {
			join()
		}
		for step := range 150 {
			switch k := rng.IntN(20); {
			case k < 5:
				w := workers[rng.IntN(len(workers))]
				l, draining := randomLoad(), rng.IntN(8) == 0
				both(func(r *Router) {
					if err := r.Update(w, &workerv1.WatchEventsResponse{Incarnation: "1", Load: l, Draining: draining}); err != nil {
						t.Fatal(err)
					}
				})
			case k == 5 && len(workers) > 2:
				i := rng.IntN(len(workers))
				w := workers[i]
				workers = slices.Delete(workers, i, i+1)
				both(func(r *Router) { r.Leave(w) })
			case k == 6:
				join()
			case k == 7:
				p = params()
				both(func(r *Router) {
					if err := r.SetParams(p); err != nil {
						t.Fatal(err)
					}
				})
			default:
				c := prompts[rng.IntN(len(prompts))]
				bs := []int{16, 16, 16, 8}[rng.IntN(4)]
				n := rng.IntN(len(c) + 1)
				if bs != 16 {
					n = 0 // the chains are of 16-token blocks
				}
				req := &routerv1.RouteRequest{PromptTokens: uint32(bs*n + rng.IntN(3*bs) + 1), BlockHashes: c[:n],
					BlockSize: uint32(bs), Explain: rng.IntN(8) == 0, ModelFingerprint: []string{"m1", "m1", "", "m3"}[rng.IntN(4)]}
				for range rng.IntN(3) {
					req.ExcludeWorkerIds = append(req.ExcludeWorkerIds, fmt.Sprintf("w%03d", rng.IntN(nextID)))
				}
				a, b := routers[0], routers[1]
				if a.byLoad(a.params, req.Explain, req.ModelFingerprint, a.fingerprints[req.ModelFingerprint]) {
					byLoad++
				}
				got, gotErr := a.Route(context.Background(), connect.NewRequest(req))
				want, wantErr := b.Route(context.Background(), connect.NewRequest(req))
				if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
					t.Fatalf("seed %d step %d: error %v, want %v", seed, step, gotErr, wantErr)
				}
				if gotErr == nil && !proto.Equal(got.Msg, want.Msg) {
					t.Fatalf("seed %d step %d:\n got %v\nwant %v", seed, step, got.Msg, want.Msg)
				}
				if a.threshold != b.threshold || a.evidence != b.evidence || a.rng.Uint64() != b.rng.Uint64() {
					t.Fatalf("seed %d step %d: threshold %d/%d evidence %d/%d, or the rng drifted", seed, step, a.threshold, b.threshold, a.evidence, b.evidence)
				}
				for id, st := range a.workers {
					if st.pendingBlocks != b.workers[id].pendingBlocks {
						t.Fatalf("seed %d step %d: %s pending %d, want %d", seed, step, id, st.pendingBlocks, b.workers[id].pendingBlocks)
					}
				}
			}
			checkLists(t, routers[0])
		}
		if got, want := gatherText(t, regs[0]), gatherText(t, regs[1]); got != want {
			t.Fatalf("seed %d: metrics\n%s\nwant\n%s", seed, got, want)
		}
	}
	if byLoad < 2000 {
		t.Fatalf("only %d decisions went by load order: the test checks too little", byLoad)
	}
}

// checkLists recomputes every load list from the workers' states.
func checkLists(t *testing.T, r *Router) {
	t.Helper()
	var want loadOrder
	for _, st := range r.order {
		load, slack := keys(r.params, st)
		if st.kind&kindPrefill != 0 {
			want.prefill = append(want.prefill, keyed{load, st.ref})
		}
		for i, k := range listKinds {
			if st.kind&k != 0 {
				want.load[i] = append(want.load[i], keyed{load, st.ref})
				want.slack[i] = append(want.slack[i], keyed{slack, st.ref})
			}
		}
	}
	same := func(name string, got, want byKey) {
		slices.SortFunc(want, cmpKeyed)
		if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("list %s:\n got %v\nwant %v", name, got, want)
		}
	}
	same("prefill", r.lists.prefill, want.prefill)
	for i := range numLists {
		same(fmt.Sprint("load ", i), r.lists.load[i], want.load[i])
		same(fmt.Sprint("slack ", i), r.lists.slack[i], want.slack[i])
	}
	for i, st := range r.order {
		if st.pos != i {
			t.Fatalf("%s at %d says pos %d", st.w.ID, i, st.pos)
		}
	}
}

// Never starve an idle worker: a burst with no load reports between its requests,
// to a large fleet of idle workers holding nothing of the prompts, goes once to
// each before any gets a second, while loaded workers holding the prompts' prefix
// get none, and the decisions go by load order.
func TestRouteByLoadReachesEveryIdleWorker(t *testing.T) {
	r, err := New(Config{BlockSize: 16, Params: DefaultParams()}, rand.New(rand.NewPCG(1, 2)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	prompt := testutil.Chains(rand.New(rand.NewPCG(3, 4)), 1, 4)[0]
	const idle, busy = 300, 20
	for i := range idle + busy {
		w := Worker{ID: fmt.Sprintf("w%03d", i), Mode: workerv1.WorkerMode_WORKER_MODE_DECODE, Policy: "threshold", TotalBlocks: 1 << 10}
		msg := &workerv1.WatchEventsResponse{Incarnation: "1", Snapshot: &workerv1.Snapshot{},
			Load: &workerv1.Load{TotalBlocks: 1 << 10, FreeBlocks: 1 << 10}}
		if i >= idle {
			// Holding the prompt's 4 blocks saves 4, but 100 active blocks cost more.
			msg.Snapshot.BlockHashes = prompt
			msg.Load.ActiveBlocks, msg.Load.FreeBlocks = 100, 900
		}
		if err := r.Update(w, msg); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]int{}
	for i := range idle {
		if !r.byLoad(r.params, false, "", 0) {
			t.Fatal("the decision does not go by load order")
		}
		resp, err := r.Route(context.Background(), connect.NewRequest(&routerv1.RouteRequest{PromptTokens: 6 * 16, BlockHashes: prompt}))
		if err != nil {
			t.Fatal(err)
		}
		id := resp.Msg.GetDecodeWorker().GetId()
		if seen[id]++; seen[id] > 1 || id >= fmt.Sprintf("w%03d", idle) {
			t.Fatalf("route %d went to %s (%d times) while idle workers had none", i, id, seen[id])
		}
	}
	// Every idle worker now has 6 pending blocks; the busy ones still cost more.
	if got := math.Round(r.workers["w000"].loadKey); got != 6 {
		t.Fatalf("w000's load key %g, want its 6 pending blocks", got)
	}
}
