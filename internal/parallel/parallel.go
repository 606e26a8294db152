// Package parallel splits a loop among the cores for the engine's kernels.
package parallel

import (
	"runtime"
	"sync/atomic"
	"time"
)

// MinProduct is the work (about one multiply-add a unit) above which a matrix
// product, or a pass over a batch's rows beside one (norms, SwiGLU), is split among
// the cores. A decode step's products (one row) are bound by reading the weights,
// not by the multiply-adds: a 576 x 576 matrix is 1.3 MB of f32, or 350 KB of Q8_0,
// read in some 25 to 60 µs, well worth the helpers; under MinWork's 2^20 only the
// largest of them were split, and two threads decoded hardly faster than one.
const MinProduct = 1 << 16

// MinWork is the threshold for other work (attention, packing weights at load):
// big enough to repay waking a goroutine, which on a busy machine can take longer
// than a small product.
const MinWork = 1 << 20

// chunksPerWorker is how finely the work is cut: enough that a worker whose core was
// taken by another process leaves little for the others to wait on.
const chunksPerWorker = 4

// linger is how long a helper goroutine spins for the next piece of work before it
// exits. A decode step is some 120 products of 40 to 80 µs with a few µs between
// them; a goroutine started (or woken) for each took a good part of a product to get
// a core, so two threads decoded hardly faster than one. Spinning helpers pick the
// next product up at once, as llama.cpp's thread pool does. Between requests they
// exit, so an idle engine burns nothing and leaves no goroutine behind.
const linger = 200 * time.Microsecond

type job struct {
	fn      func(lo, hi int)
	n       int
	chunks  int
	next    atomic.Int64
	pending atomic.Int64 // chunks not yet finished
}

// do takes chunks until none is left.
func (j *job) do() {
	for {
		c := int(j.next.Add(1)) - 1
		if c >= j.chunks {
			return
		}
		j.fn(j.n*c/j.chunks, j.n*(c+1)/j.chunks)
		j.pending.Add(-1)
	}
}

// The current job and the helpers spinning for the next one. One process-wide set,
// like the runtime's own Ps: the cores are the process's, whoever asks for them.
var (
	current  atomic.Pointer[job]
	spinning atomic.Int32
)

// For runs fn over [0, n), cut into chunks that the calling goroutine and up to
// GOMAXPROCS-1 helpers take in turn, when the work (n items of cost each) is at least
// minWork; below that, or with one core, it calls fn(0, n).
//
// The caller works too and waits only for chunks a helper has begun, never for a
// helper to arrive: on a machine shared with other processes a goroutine can wait
// milliseconds for a core, longer than a decode step's whole product. A helper that
// arrives after the work is taken returns without calling fn. fn must not care which
// goroutine runs which part.
func For(n, cost, minWork int, fn func(lo, hi int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 || n*cost < minWork {
		fn(0, n)
		return
	}
	j := &job{fn: fn, n: n, chunks: min(n, workers*chunksPerWorker)}
	j.pending.Store(int64(j.chunks))
	current.Store(j)
	// Helpers already spinning will see j; start the ones missing.
	for range workers - 1 - int(spinning.Load()) {
		go helper(j)
	}
	j.do()
	for i := 0; j.pending.Load() > 0; i++ {
		if i%64 == 63 {
			runtime.Gosched() // a helper holding a chunk may need this core
		}
	}
	current.CompareAndSwap(j, nil)
}

// helper works on j, then spins for the next job for up to linger.
func helper(j *job) {
	for {
		j.do()
		spinning.Add(1)
		deadline := time.Now().Add(linger)
		var next *job
		for i := 0; ; i++ {
			if c := current.Load(); c != nil && c != j && c.next.Load() < int64(c.chunks) {
				next = c
				break
			}
			if i%32 == 31 && time.Now().After(deadline) {
				break
			}
		}
		spinning.Add(-1)
		if next == nil {
			return
		}
		j = next
	}
}
