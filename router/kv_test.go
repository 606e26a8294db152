package router_test

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/kvcache/blockhash"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/router"
)

func newRouter(t *testing.T, p router.Params) *router.Router {
	t.Helper()
	r, err := router.New(router.Config{BlockSize: 16, Params: p}, rand.New(rand.NewPCG(3, 4)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func tokens(seed, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(seed*100003+i*7) % 100000
	}
	return out
}

func routeTokens(t *testing.T, r *router.Router, toks []uint32, exclude ...string) *routerv1.RouteResponse {
	t.Helper()
	req := &routerv1.RouteRequest{
		PromptTokens: uint32(len(toks)), BlockHashes: blockhash.Hash(toks, 16), BlockSize: 16, Explain: true,
		ExcludeWorkerIds: exclude,
	}
	return mustRouteDirect(t, r, req)
}

func decodeWorker(id, policy string) router.Worker {
	return router.Worker{ID: id, Address: id + ":1", Mode: workerv1.WorkerMode_WORKER_MODE_DECODE, Policy: policy, TotalBlocks: 4096}
}

// A request whose prefix one worker holds goes to that worker, even when it is a
// little busier than the others.
func TestRouteFollowsSharedPrefix(t *testing.T) {
	r := newRouter(t, router.DefaultParams())
	system := tokens(1, 320) // a 20-block shared system prompt
	a, b, c := decodeWorker("a", "threshold"), decodeWorker("b", "threshold"), decodeWorker("c", "threshold")
	join(t, r, a, &workerv1.Load{TotalBlocks: 4096, FreeBlocks: 4000})
	join(t, r, b, &workerv1.Load{TotalBlocks: 4096, FreeBlocks: 4000, ActiveBlocks: 5}, blockhash.Hash(system, 16)...)
	join(t, r, c, &workerv1.Load{TotalBlocks: 4096, FreeBlocks: 4000})
	for i := range 5 {
		prompt := append(append([]uint32(nil), system...), tokens(100+i, 70)...)
		resp := routeTokens(t, r, prompt)
		if resp.GetDecodeWorker().GetId() != "b" || resp.GetDecodeCachedBlocks() != 20 {
			t.Fatalf("request %d went to %s with %d cached blocks, want b with 20", i, resp.GetDecodeWorker().GetId(), resp.GetDecodeCachedBlocks())
		}
		observeLoad(t, r, b, &workerv1.Load{TotalBlocks: 4096, FreeBlocks: 4000, ActiveBlocks: 5})
	}
}

// Without a shared prefix, a burst spreads evenly over idle workers.
func TestRouteBalancesWithoutPrefix(t *testing.T) {
	r := newRouter(t, router.DefaultParams())
	for _, id := range []string{"a", "b", "c", "d"} {
		join(t, r, decodeWorker(id, "threshold"), &workerv1.Load{TotalBlocks: 4096, FreeBlocks: 4096})
	}
	counts := map[string]int{}
	for i := range 40 {
		counts[routeTokens(t, r, tokens(i, 64)).GetDecodeWorker().GetId()]++
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		if counts[id] != 10 {
			t.Fatalf("40 requests landed %v, want 10 on each", counts)
		}
	}
}

func TestGatingClasses(t *testing.T) {
	p := router.DefaultParams()
	p.ISLGate, p.ISLThreshold = true, 256
	r := newRouter(t, p)
	agg := router.Worker{ID: "agg", Mode: workerv1.WorkerMode_WORKER_MODE_AGGREGATED, TotalBlocks: 4096}
	cond := decodeWorker("cond", "threshold")
	dis := decodeWorker("disagg", "always-remote")
	for _, w := range []router.Worker{agg, cond, dis} {
		join(t, r, w, nil)
	}
	short, long := tokens(1, 100), tokens(2, 1000)
	for range 10 {
		resp := routeTokens(t, r, short)
		if id := resp.GetDecodeWorker().GetId(); id == "disagg" || resp.GetExplanation().GetGateClass() != "local" {
			t.Fatalf("short prompt went to %s in class %s", id, resp.GetExplanation().GetGateClass())
		}
		resp = routeTokens(t, r, long)
		if id := resp.GetDecodeWorker().GetId(); id == "agg" || resp.GetExplanation().GetGateClass() != "disagg" {
			t.Fatalf("long prompt went to %s in class %s", id, resp.GetExplanation().GetGateClass())
		}
	}
	// A long prompt whose prefix is cached is short in effect.
	cached := long[:800]
	if err := r.Update(cond, &workerv1.WatchEventsResponse{Incarnation: "1", Events: []*workerv1.KVEvent{{
		Id: 1, Kind: &workerv1.KVEvent_Stored{Stored: &workerv1.BlockStored{BlockHashes: blockhash.Hash(cached, 16)}},
	}}}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []router.Worker{agg, cond, dis} {
		observeLoad(t, r, w, &workerv1.Load{}) // clears what was routed above
	}
	resp := routeTokens(t, r, long)
	if e := resp.GetExplanation(); e.GetEffectiveTokens() != 200 || e.GetGateClass() != "local" || resp.GetDecodeWorker().GetId() != "cond" {
		t.Fatalf("cached long prompt: effective %d class %s worker %s, want 200 local cond", e.GetEffectiveTokens(), e.GetGateClass(),
			resp.GetDecodeWorker().GetId())
	}
}

// An empty class falls back to every worker instead of failing.
func TestGatingEmptyClassFallsBack(t *testing.T) {
	p := router.DefaultParams()
	p.ISLGate, p.ISLThreshold = true, 256
	r := newRouter(t, p)
	join(t, r, decodeWorker("disagg", "always-remote"), nil)
	resp := routeTokens(t, r, tokens(1, 50))
	if resp.GetDecodeWorker().GetId() != "disagg" || resp.GetExplanation().GetGateClass() != "fallback-all" {
		t.Fatalf("got %s in class %s, want disagg via fallback-all", resp.GetDecodeWorker().GetId(), resp.GetExplanation().GetGateClass())
	}
}

func TestAdaptiveThresholdStaysInBounds(t *testing.T) {
	p := router.DefaultParams()
	p.ISLGate, p.ISLAdaptive, p.ISLThreshold, p.ISLMin, p.ISLMax, p.ISLStep, p.ISLHysteresis = true, true, 256, 128, 512, 64, 2
	r := newRouter(t, p)
	local := router.Worker{ID: "agg", Mode: workerv1.WorkerMode_WORKER_MODE_AGGREGATED, TotalBlocks: 1 << 16}
	dis := decodeWorker("disagg", "always-remote")
	threshold := func() uint32 { return routeTokens(t, r, tokens(999, 16)).GetExplanation().GetIslThreshold() }

	// The local class is swamped: short prompts keep finding the disaggregated
	// worker far cheaper, so the threshold falls, but never below isl_min.
	join(t, r, local, &workerv1.Load{ActiveBlocks: 5000})
	join(t, r, dis, &workerv1.Load{})
	for range 50 {
		routeTokens(t, r, tokens(1, 50))
		observeLoad(t, r, dis, &workerv1.Load{})
	}
	if got := threshold(); got != 128 {
		t.Fatalf("threshold %d after the local class stayed costly, want isl_min 128", got)
	}
	// Now the other way: long prompts find the local worker far cheaper.
	observeLoad(t, r, local, &workerv1.Load{})
	observeLoad(t, r, dis, &workerv1.Load{ActiveBlocks: 5000})
	for range 50 {
		routeTokens(t, r, tokens(2, 1500))
		observeLoad(t, r, local, &workerv1.Load{})
	}
	if got := threshold(); got != 512 {
		t.Fatalf("threshold %d after the disaggregated class stayed costly, want isl_max 512", got)
	}
}

// A restarted worker's old cache is forgotten at once, and its new one known from
// its snapshot.
func TestIndexExactAfterRestart(t *testing.T) {
	r := newRouter(t, router.DefaultParams())
	a, b := decodeWorker("a", "threshold"), decodeWorker("b", "threshold")
	old, fresh := tokens(1, 160), tokens(2, 160)
	join(t, r, a, nil, blockhash.Hash(old, 16)...)
	join(t, r, b, nil)
	if resp := routeTokens(t, r, old); resp.GetDecodeWorker().GetId() != "a" || resp.GetDecodeCachedBlocks() != 10 {
		t.Fatalf("before restart: %s with %d cached", resp.GetDecodeWorker().GetId(), resp.GetDecodeCachedBlocks())
	}
	err := r.Update(a, &workerv1.WatchEventsResponse{Incarnation: "2", Load: &workerv1.Load{}})
	if !errors.Is(err, router.ErrResync) {
		t.Fatalf("new incarnation without a snapshot: %v, want ErrResync", err)
	}
	if resp := routeTokens(t, r, old); resp.GetDecodeCachedBlocks() != 0 {
		t.Fatalf("restarted worker still credited with %d cached blocks", resp.GetDecodeCachedBlocks())
	}
	if err := r.Update(a, &workerv1.WatchEventsResponse{Incarnation: "2", Load: &workerv1.Load{}, Snapshot: &workerv1.Snapshot{LastEventId: 7,
		BlockHashes: blockhash.Hash(fresh, 16)}}); err != nil {
		t.Fatal(err)
	}
	if resp := routeTokens(t, r, fresh); resp.GetDecodeWorker().GetId() != "a" || resp.GetDecodeCachedBlocks() != 10 {
		t.Fatalf("after snapshot: %s with %d cached, want a with 10", resp.GetDecodeWorker().GetId(), resp.GetDecodeCachedBlocks())
	}
}

// A gap in the event ids drops the worker's entries until a snapshot arrives.
func TestIndexExactAfterEventGap(t *testing.T) {
	r := newRouter(t, router.DefaultParams())
	a := decodeWorker("a", "threshold")
	join(t, r, a, nil)
	p1, p2 := tokens(1, 64), tokens(2, 64)
	stored := func(id uint64, toks []uint32) *workerv1.KVEvent {
		return &workerv1.KVEvent{Id: id, Kind: &workerv1.KVEvent_Stored{Stored: &workerv1.BlockStored{BlockHashes: blockhash.Hash(toks, 16)}}}
	}
	if err := r.Update(a, &workerv1.WatchEventsResponse{Incarnation: "1", Events: []*workerv1.KVEvent{stored(1, p1)}}); err != nil {
		t.Fatal(err)
	}
	if got := routeTokens(t, r, p1).GetDecodeCachedBlocks(); got != 4 {
		t.Fatalf("after event 1: %d cached, want 4", got)
	}
	err := r.Update(a, &workerv1.WatchEventsResponse{Incarnation: "1", Events: []*workerv1.KVEvent{stored(3, p2)}})
	if !errors.Is(err, router.ErrResync) {
		t.Fatalf("event 3 after 1: %v, want ErrResync", err)
	}
	if got := routeTokens(t, r, p1).GetDecodeCachedBlocks(); got != 0 {
		t.Fatalf("after a gap the index still credits %d blocks", got)
	}
	// Events after a gap but before a snapshot are refused too.
	if err := r.Update(a, &workerv1.WatchEventsResponse{Incarnation: "1", Events: []*workerv1.KVEvent{stored(4, p2)}}); !errors.Is(err, router.ErrResync) {
		t.Fatalf("events before a snapshot: %v, want ErrResync", err)
	}
	snap := append(blockhash.Hash(p1, 16), blockhash.Hash(p2, 16)...)
	if err := r.Update(a, &workerv1.WatchEventsResponse{Incarnation: "1", Snapshot: &workerv1.Snapshot{LastEventId: 4, BlockHashes: snap}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range [][]uint32{p1, p2} {
		if got := routeTokens(t, r, p).GetDecodeCachedBlocks(); got != 4 {
			t.Fatalf("after the snapshot: %d cached, want 4", got)
		}
	}
	removed := &workerv1.KVEvent{Id: 5, Kind: &workerv1.KVEvent_Removed{Removed: &workerv1.BlockRemoved{BlockHashes: blockhash.Hash(p2, 16)[2:]}}}
	if err := r.Update(a, &workerv1.WatchEventsResponse{Incarnation: "1", Events: []*workerv1.KVEvent{removed}}); err != nil {
		t.Fatal(err)
	}
	if got := routeTokens(t, r, p2).GetDecodeCachedBlocks(); got != 2 {
		t.Fatalf("after removing p2's last two blocks: %d cached, want 2", got)
	}
}

// A worker cannot make the index grow past its own pool.
func TestIndexBoundedByWorkerPool(t *testing.T) {
	r := newRouter(t, router.DefaultParams())
	small := router.Worker{ID: "small", Mode: workerv1.WorkerMode_WORKER_MODE_DECODE, TotalBlocks: 8}
	err := r.Update(small, &workerv1.WatchEventsResponse{Incarnation: "1", Snapshot: &workerv1.Snapshot{BlockHashes: blockhash.Hash(tokens(1, 16*20), 16)}})
	if !errors.Is(err, router.ErrResync) {
		t.Fatalf("20 blocks from an 8-block worker: %v, want ErrResync", err)
	}
}

func mustRouteDirect(t *testing.T, r *router.Router, req *routerv1.RouteRequest) *routerv1.RouteResponse {
	t.Helper()
	resp, err := routeDirect(r, req)
	if err != nil {
		t.Fatalf("Route: %v", err)
	}
	return resp
}

// A snapshot in the middle of a stream (the worker's subscriber fell out of its
// event ring) replaces what the router held: blocks it no longer lists are
// dropped, new ones credited, and events continue from its last event id.
func TestSnapshotMidStreamReplacesEntries(t *testing.T) {
	r := newRouter(t, router.DefaultParams())
	a := decodeWorker("a", "threshold")
	p1, p2, p3 := tokens(1, 64), tokens(2, 64), tokens(3, 64)
	join(t, r, a, nil, append(blockhash.Hash(p1, 16), blockhash.Hash(p2, 16)...)...)
	for _, p := range [][]uint32{p1, p2} {
		if got := routeTokens(t, r, p).GetDecodeCachedBlocks(); got != 4 {
			t.Fatalf("before the snapshot: %d cached, want 4", got)
		}
	}
	// The worker now holds p1, half of p2, and p3; the snapshot lists p3 twice.
	snap := append(append(blockhash.Hash(p1, 16), blockhash.Hash(p2, 16)[:2]...), blockhash.Hash(p3, 16)...)
	snap = append(snap, blockhash.Hash(p3, 16)...)
	if err := r.Update(a, &workerv1.WatchEventsResponse{Incarnation: "1", Snapshot: &workerv1.Snapshot{LastEventId: 40, BlockHashes: snap}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		prompt []uint32
		want   uint32
	}{{p1, 4}, {p2, 2}, {p3, 4}} {
		if got := routeTokens(t, r, c.prompt).GetDecodeCachedBlocks(); got != c.want {
			t.Fatalf("after the snapshot: %d cached, want %d", got, c.want)
		}
	}
	removed := &workerv1.KVEvent{Id: 41, Kind: &workerv1.KVEvent_Removed{Removed: &workerv1.BlockRemoved{BlockHashes: blockhash.Hash(p3, 16)[1:]}}}
	if err := r.Update(a, &workerv1.WatchEventsResponse{Incarnation: "1", Events: []*workerv1.KVEvent{removed}}); err != nil {
		t.Fatalf("event 41 after a snapshot at 40: %v", err)
	}
	if got := routeTokens(t, r, p3).GetDecodeCachedBlocks(); got != 1 {
		t.Fatalf("after removing p3's last three blocks: %d cached, want 1", got)
	}
	gap := &workerv1.KVEvent{Id: 43, Kind: &workerv1.KVEvent_Cleared{Cleared: &workerv1.AllBlocksCleared{}}}
	if err := r.Update(a, &workerv1.WatchEventsResponse{Incarnation: "1", Events: []*workerv1.KVEvent{gap}}); !errors.Is(err, router.ErrResync) {
		t.Fatalf("event 43 after 41: %v, want ErrResync", err)
	}
}

// A snapshot over a synced worker's limit drops its entries, as any over-full
// report does, rather than keeping the old ones.
func TestSnapshotOverLimitDropsEntries(t *testing.T) {
	r := newRouter(t, router.DefaultParams())
	small := router.Worker{ID: "small", Mode: workerv1.WorkerMode_WORKER_MODE_DECODE, Policy: "threshold", TotalBlocks: 8}
	p := tokens(1, 64)
	join(t, r, small, nil, blockhash.Hash(p, 16)...)
	if got := routeTokens(t, r, p).GetDecodeCachedBlocks(); got != 4 {
		t.Fatalf("before: %d cached, want 4", got)
	}
	err := r.Update(small, &workerv1.WatchEventsResponse{Incarnation: "1", Snapshot: &workerv1.Snapshot{BlockHashes: blockhash.Hash(tokens(1, 16*9), 16)}})
	if !errors.Is(err, router.ErrResync) {
		t.Fatalf("9 blocks from an 8-block worker: %v, want ErrResync", err)
	}
	if got := routeTokens(t, r, p).GetDecodeCachedBlocks(); got != 0 {
		t.Fatalf("after an over-full snapshot the index still credits %d blocks", got)
	}
}
