package router

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// BenchmarkSnapshotApply applies one worker's snapshot of about 1,000 blocks to a
// router whose index holds a million (BenchmarkRoute's 100 prefill + 900 decode
// fleet), a different worker each time, and reports how long Update held the
// router's lock (held_*: every decision waits that long behind it) and how long
// the whole call took (update_p50_us). The cases: a worker fallen out of its
// event ring resends what the router already holds (resend); a worker whose
// entries were dropped (an event gap, a new incarnation) sends them all again
// (rejoin); half of a worker's blocks were replaced since (turnover).
func BenchmarkSnapshotApply(b *testing.B) {
	r, _ := benchFleet(b, 1000, 10)
	ws := make([]Worker, 0, len(r.order))
	for _, st := range r.order {
		ws = append(ws, st.w)
	}
	// Shared by every run (b.Run's function is called again with each b.N), so
	// that no run repeats an earlier one's incarnations or new blocks.
	rng, incarnations := rand.New(rand.NewPCG(7, 7)), 0
	for _, kind := range []string{"resend", "rejoin", "turnover"} {
		b.Run(kind, func(b *testing.B) {
			held := make([]time.Duration, 0, b.N)
			whole := make([]time.Duration, 0, b.N)
			var last time.Duration
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				w := ws[i%len(ws)]
				st := r.workers[w.ID]
				hashes := r.ix.Hashes(st.ref)
				inc := st.incarnation
				switch kind {
				case "rejoin":
					incarnations++
					inc = "rejoin" + strconv.Itoa(incarnations)
					if err := r.Update(w, &workerv1.WatchEventsResponse{Incarnation: inc}); err == nil {
						b.Fatal("a new incarnation without a snapshot was accepted")
					}
				case "turnover":
					for j := len(hashes) / 2; j < len(hashes); j++ {
						hashes[j] = rng.Uint64()
					}
				}
				msg := &workerv1.WatchEventsResponse{Incarnation: inc, Snapshot: &workerv1.Snapshot{BlockHashes: hashes, LastEventId: st.lastEvent}}
				r.lockHeld = func(d time.Duration) { last = d }
				b.StartTimer()
				t0 := time.Now()
				err := r.Update(w, msg)
				whole = append(whole, time.Since(t0))
				b.StopTimer()
				r.lockHeld = nil
				if err != nil {
					b.Fatal(err)
				}
				if got := r.ix.Held(st.ref); got != len(hashes) {
					b.Fatalf("%s holds %d blocks after a snapshot of %d", w.ID, got, len(hashes))
				}
				held = append(held, last)
				b.StartTimer()
			}
			b.StopTimer()
			b.ReportMetric(percentile(whole, 50), "update_p50_us")
			b.ReportMetric(percentile(held, 50), "held_p50_us")
			b.ReportMetric(percentile(held, 99), "held_p99_us")
			b.ReportMetric(float64(held[len(held)-1].Nanoseconds())/1e3, "held_max_us")
			b.ReportMetric(float64(r.ix.Blocks()), "indexed_blocks")
		})
	}
}
