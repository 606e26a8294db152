//go:build tailprobe

package router

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"testing"
	"time"

	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// TestTailProbe is a diagnostic, not a test: it asserts nothing, so it is built
// only with -tags tailprobe and never runs in the test suite. It takes BenchmarkRoute's 100 prefill + 900 decode fleet
// (TAIL_FLEET=1024: 1,024 decode workers) through
// TAIL_ROUNDS rounds (12) of its 256 prompts and prints where the decisions' tail
// comes from:
// the least time of each prompt over the rounds (the decision's own work, without
// interference), a register-only computation of TAIL_SPIN steps timed after each
// decision (the host's), the decisions right after the benchmark's reset of pending
// blocks, and when the slowest happened. TAIL_GC=1 collects the setup's garbage
// first, TAIL_GCOFF=1 turns the GC off, TAIL_NORESET=1 drops the reset,
// TAIL_INGEST=1 applies 10,000 load reports a second from another goroutine (and
// times one 1,000-block snapshot), TAIL_PROF=file writes a CPU profile of the
// decisions alone.
func TestTailProbe(t *testing.T) {
	workers, prefillEvery := 1000, 10
	if os.Getenv("TAIL_FLEET") == "1024" {
		workers, prefillEvery = 1024, 0 // decode workers only
	}
	r, reqs := benchFleet(t, workers, prefillEvery)
	ctx := context.Background()
	rounds, _ := strconv.Atoi(os.Getenv("TAIL_ROUNDS"))
	if rounds == 0 {
		rounds = 12
	}
	reset := os.Getenv("TAIL_NORESET") == ""
	if os.Getenv("TAIL_GC") != "" {
		runtime.GC()
	}
	if os.Getenv("TAIL_GCOFF") != "" {
		runtime.GC()
		debug.SetGCPercent(-1)
	}
	if f := os.Getenv("TAIL_PROF"); f != "" {
		out, _ := os.Create(f)
		pprof.StartCPUProfile(out)
		defer pprof.StopCPUProfile()
	}
	stop, done := make(chan struct{}), make(chan struct{})
	close(done) // reopened below when an ingest goroutine runs
	ingested := 0
	var updates []time.Duration
	var snapTime time.Duration
	if os.Getenv("TAIL_INGEST") != "" {
		// Load reports at 10,000/s (1,000 workers every 100 ms) with a 16-block KV
		// event on every tenth, as the event goroutines apply them.
		ws := make([]Worker, 0, len(r.order))
		for _, st := range r.order {
			ws = append(ws, st.w)
		}
		// One snapshot of 1,000 blocks, as a reconnecting worker sends: how long it holds the lock.
		{
			st := r.workers[ws[1].ID]
			hs := r.ix.Hashes(st.ref)
			t0 := time.Now()
			_ = r.Update(ws[1], &workerv1.WatchEventsResponse{Incarnation: "1", Snapshot: &workerv1.Snapshot{BlockHashes: hs, LastEventId: st.lastEvent}})
			snapTime = time.Since(t0)
		}
		done = make(chan struct{})
		go func() {
			defer close(done)
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			k := 0
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				for range 10 {
					w := ws[k%len(ws)]
					k++
					t0 := time.Now()
					_ = r.Update(w, &workerv1.WatchEventsResponse{Incarnation: "1", Load: &workerv1.Load{TotalBlocks: 1 << 20, FreeBlocks: 4096, ActiveBlocks: uint32(k % 50)}})
					updates = append(updates, time.Since(t0))
					ingested++
				}
			}
		}()
	}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	n := len(reqs)
	lat := make([]time.Duration, rounds*n)
	spin := make([]time.Duration, rounds*n)
	var sink uint64
	at := make([]time.Duration, rounds*n)
	begin := time.Now()
	for i := range rounds * n {
		t0 := time.Now()
		if _, err := r.Route(ctx, reqs[i%n]); err != nil {
			t.Fatal(err)
		}
		lat[i] = time.Since(t0)
		at[i] = t0.Sub(begin)
		// A fixed, cache-resident computation of about a decision's length, timed
		// the same way: the host's noise floor.
		t1 := time.Now()
		x := uint64(i)
		for range spinIters {
			x = x*6364136223846793005 + 1442695040888963407
		}
		sink += x
		spin[i] = time.Since(t1)
		if reset && i%64 == 0 {
			r.mu.Lock()
			for _, st := range r.workers {
				st.pendingBlocks = 0
				r.reindex(st)
			}
			r.mu.Unlock()
		}
	}
	runtime.ReadMemStats(&ms1)
	// The ingest goroutine is done before what it counted is read.
	close(stop)
	<-done
	pct := func(l []time.Duration) string {
		s := slices.Clone(l)
		slices.Sort(s)
		return fmt.Sprintf("p50 %v p99 %v p999 %v max %v (n %d)", s[len(s)/2], s[len(s)*99/100], s[len(s)*999/1000], s[len(s)-1], len(s))
	}
	fmt.Println("ingested", ingested, "snapshot of 1,000 blocks held the lock", snapTime)
	if len(updates) > 0 {
		fmt.Println("a load report's Update (lock wait included):", pct(updates))
	}
	fmt.Println("all:", pct(lat), "gcs", ms1.NumGC-ms0.NumGC, "heap", ms1.HeapAlloc>>20, "MB")
	// Per query: the least of its rounds is its work without interference.
	mins := make([]time.Duration, n)
	for q := range n {
		mins[q] = time.Hour
		for k := range rounds {
			mins[q] = min(mins[q], lat[k*n+q])
		}
	}
	fmt.Println("spin:", pct(spin), sink%2)
	fmt.Println("per-query min:", pct(mins))
	// After a reset (i%64 == 1) against the rest.
	var after, rest []time.Duration
	for i, d := range lat {
		if i%64 == 1 {
			after = append(after, d)
		} else {
			rest = append(rest, d)
		}
	}
	fmt.Println("after reset:", pct(after))
	fmt.Println("others:", pct(rest))
	// Slow ones: when.
	s := slices.Clone(lat)
	slices.Sort(s)
	p99 := s[len(s)*99/100]
	fmt.Print("slowest at (ms since begin, us, query, excess over its min): ")
	for i, d := range lat {
		if d >= p99 {
			fmt.Printf("%.1f/%.0f/q%d/%.0f ", at[i].Seconds()*1e3, d.Seconds()*1e6, i%n, (d-mins[i%n]).Seconds()*1e6)
		}
	}
	fmt.Println()
}

var spinIters = func() int { n, _ := strconv.Atoi(os.Getenv("TAIL_SPIN")); return max(n, 1) }()
