package router

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// BenchmarkRoute times whole routing decisions for 8k-token prompts against a
// router whose index holds about a million blocks, reporting p50 and p99. The
// fleets are decode workers only, and issue 14's 1,000 workers: 100 prefill (every
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
			src, queries := benchIndex(b, workers, 1_000_000)
			r, err := New(Config{BlockSize: 16, Params: DefaultParams()}, rand.New(rand.NewPCG(1, 1)), prometheus.NewRegistry())
			if err != nil {
				b.Fatal(err)
			}
			for ref := range src.owned {
				hashes := make([]uint64, 0, len(src.owned[ref]))
				for h := range src.owned[ref] {
					hashes = append(hashes, h)
				}
				w := Worker{ID: fmt.Sprintf("w%04d", ref), Mode: workerv1.WorkerMode_WORKER_MODE_DECODE, Policy: "threshold", TotalBlocks: len(hashes) + 1}
				if fleet.prefillEvery > 0 {
					// As served: every worker names its model, and so does every request.
					w.Fingerprint = "sim/seed=1"
					if int(ref)%fleet.prefillEvery == 0 {
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
				if fleet.prefillEvery > 0 {
					reqs[i].Msg.ModelFingerprint = "sim/seed=1"
				}
			}
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			var evict []byte
			if fleet.cold {
				evict = make([]byte, 8<<20)
			}
			for i := range b.N {
				for j := 0; j < len(evict); j += 64 {
					evict[j]++
				}
				t0 := time.Now()
				if _, err := r.Route(ctx, reqs[i%len(reqs)]); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
				if i%64 == 0 {
					r.mu.Lock()
					for _, st := range r.workers {
						st.pendingBlocks = 0 // as load reports would
						r.reindex(st)
					}
					r.mu.Unlock()
				}
			}
			reportPercentiles(b, lat)
			b.ReportMetric(float64(r.ix.Blocks()), "indexed_blocks")
		})
	}
}
