package router

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// BenchmarkRoute times whole routing decisions for 8k-token prompts against a
// router whose index holds about a million blocks, reporting p50 and p99. The
// fleets are decode workers only, and 1,000 workers: 100 prefill (every
// tenth) and 900 decode, whose prefill workers are ranked too.
func BenchmarkRoute(b *testing.B) {
	for _, fleet := range []struct {
		workers, prefillEvery int
		cold                  bool
	}{{16, 0, false}, {256, 0, false}, {1024, 0, false}, {1000, 10, false}, {1000, 10, true}} {
		workers := fleet.workers
		name := sizeName(workers)
		if fleet.prefillEvery > 0 {
			name += ",prefill=" + itoa(workers/fleet.prefillEvery)
		}
		if fleet.cold {
			// In a process that does other work between decisions (a thousand sim
			// workers, the frontend), the router's state is no longer in the CPU's
			// caches when the next decision comes: evicted here by writing 8 MiB.
			name += ",cold"
		}
		b.Run(name, func(b *testing.B) {
			r, reqs := benchFleet(b, workers, fleet.prefillEvery)
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			// The host's share of the tail: a computation in registers of about a
			// median decision's length, timed the same way after each decision. Its
			// p99 (host_p99_us) is what the machine alone adds to anything that
			// short; a decision's p99 near it is the host's, not the router's.
			spins := spinFor(medianRoute(b, r, reqs))
			host := make([]time.Duration, 0, b.N)
			var evict []byte
			if fleet.cold {
				evict = make([]byte, 8<<20)
			}
			// The setup's garbage (the index's construction) is not the decisions':
			// collected now, so that gcs counts the cycles the decisions brought.
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			for i := range b.N {
				for j := 0; j < len(evict); j += 64 {
					evict[j]++
				}
				t0 := time.Now()
				if _, err := r.Route(ctx, reqs[i%len(reqs)]); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				spin(spins)
				host = append(host, time.Since(t1))
				lat = append(lat, t1.Sub(t0))
				if i%64 == 0 {
					r.mu.Lock()
					for _, st := range r.workers {
						st.pendingBlocks = 0 // as load reports would
						r.reindex(st)
					}
					r.mu.Unlock()
				}
			}
			b.StopTimer()
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.NumGC-before.NumGC), "gcs")
			b.ReportMetric(percentile(host, 99), "host_p99_us")
			reportPercentiles(b, lat)
			b.ReportMetric(float64(r.ix.Blocks()), "indexed_blocks")
		})
	}
}

// benchFleet is BenchmarkRoute's router: workers workers (every prefillEvery-th a
// prefill worker, none if 0) holding about a million blocks between them, and
// requests for 8k-token prompts that match them.
func benchFleet(b testing.TB, workers, prefillEvery int) (*Router, []*connect.Request[routerv1.RouteRequest]) {
	src, queries := benchIndex(b, workers, 1_000_000)
	r, err := New(Config{BlockSize: 16, Params: DefaultParams()}, rand.New(rand.NewPCG(1, 1)), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	for ref := range workerRef(src.Slots()) {
		hashes := src.Hashes(ref)
		w := Worker{ID: fmt.Sprintf("w%04d", ref), Mode: workerv1.WorkerMode_WORKER_MODE_DECODE, Policy: "threshold", TotalBlocks: len(hashes) + 1}
		if prefillEvery > 0 {
			// As served: every worker names its model, and so does every request.
			w.Fingerprint = "sim/seed=1"
			if int(ref)%prefillEvery == 0 {
				w.Mode, w.Policy = workerv1.WorkerMode_WORKER_MODE_PREFILL, ""
			}
		}
		load := &workerv1.Load{TotalBlocks: uint32(len(hashes) + 4096), FreeBlocks: 4096, ActiveBlocks: uint32(ref % 50)}
		if err := r.Update(w, &workerv1.WatchEventsResponse{Incarnation: "1", Snapshot: &workerv1.Snapshot{BlockHashes: hashes}, Load: load}); err != nil {
			b.Fatal(err)
		}
	}
	reqs := make([]*connect.Request[routerv1.RouteRequest], len(queries))
	for i, q := range queries {
		reqs[i] = connect.NewRequest(&routerv1.RouteRequest{PromptTokens: uint32(len(q) * 16), BlockHashes: q, BlockSize: 16})
		if prefillEvery > 0 {
			reqs[i].Msg.ModelFingerprint = "sim/seed=1"
		}
	}
	return r, reqs
}

// medianRoute is the median of 201 decisions, which also warm the router up.
func medianRoute(b *testing.B, r *Router, reqs []*connect.Request[routerv1.RouteRequest]) time.Duration {
	lat := make([]time.Duration, 201)
	for i := range lat {
		t0 := time.Now()
		if _, err := r.Route(context.Background(), reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t0)
	}
	slices.Sort(lat)
	return lat[len(lat)/2]
}

// spinSink keeps spin's result alive.
var spinSink uint64

// spin runs n steps of a computation that touches no memory: a fixed amount of
// work whose time varies only with what the host does to the thread.
func spin(n int) {
	x := spinSink
	for range n {
		x = x*6364136223846793005 + 1442695040888963407
	}
	spinSink = x
}

// spinFor is how many spin steps take about d.
func spinFor(d time.Duration) int {
	const probe = 1 << 16
	best := time.Hour
	for range 5 {
		t0 := time.Now()
		spin(probe)
		best = min(best, time.Since(t0))
	}
	return max(1, int(float64(probe)*float64(d)/float64(max(best, 1))))
}
