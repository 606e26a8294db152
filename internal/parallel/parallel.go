// Package parallel splits a loop among the cores for the engine's kernels.
package parallel

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// chunksPerWorker is how finely the work is cut: enough that a worker whose core was
// taken by another process leaves little for the others to wait on.
const chunksPerWorker = 4

// For runs fn over [0, n), cut into chunks that the calling goroutine and up to
// GOMAXPROCS-1 helpers take in turn, when the work (n items of cost each) is at least
// minWork; below that, or with one core, it calls fn(0, n).
//
// The caller works too and waits only for chunks a helper has begun, never for a
// helper to start: on a machine shared with other processes a goroutine can wait
// milliseconds for a core, longer than a decode step's whole product, and a fixed
// split would make the step wait for it. A helper that starts after the work is done
// finds nothing left and returns without calling fn. fn must not care which
// goroutine runs which part.
func For(n, cost, minWork int, fn func(lo, hi int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 || n*cost < minWork {
		fn(0, n)
		return
	}
	chunks := min(n, workers*chunksPerWorker)
	var next atomic.Int64
	var wg sync.WaitGroup
	wg.Add(chunks)
	work := func() {
		for {
			c := int(next.Add(1)) - 1
			if c >= chunks {
				return
			}
			fn(n*c/chunks, n*(c+1)/chunks)
			wg.Done()
		}
	}
	for range workers - 1 {
		go work()
	}
	work()
	wg.Wait()
}
