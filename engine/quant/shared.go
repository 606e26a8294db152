package quant

import (
	"fmt"
	"sync"

	"github.com/tandem-serve/tandem/internal/parallel"
)

// Product is one matrix of a group that reads the same input, and where its outputs go.
type Product struct {
	W   *Matrix
	Out []float32
	Ldo int
}

// MulAddShared is W.MulAdd(m, x, ldx, Out, Ldo) for every product, all of the same K:
// Q, K and V, or gate and up. x is quantized once for each activation format the
// matrices need, not once per matrix, and the columns of all of them are split among
// the cores together, so that the small K and V products of a decode step do not each
// pay for waking the other cores. The outputs are the same bits as MulAdd's (MulAdd is
// this with one product).
//
// It allocates nothing once warm: a decode step makes some 120 products.
func MulAddShared(m int, x []float32, ldx int, ps []Product) {
	if len(ps) == 0 || m == 0 {
		return
	}
	kk := ps[0].W.k
	for _, p := range ps {
		if p.W.k != kk {
			panic(fmt.Sprintf("quant: MulAddShared of matrices of %d and %d inputs", kk, p.W.k))
		}
		if m < 0 || ldx < kk || p.Ldo < p.W.n || len(x) < (m-1)*ldx+kk || len(p.Out) < (m-1)*p.Ldo+p.W.n {
			panic(fmt.Sprintf("quant: MulAddShared of %d rows of %d values (stride %d, %d given) into %d outputs (stride %d, %d given)",
				m, kk, ldx, len(x), p.W.n, p.Ldo, len(p.Out)))
		}
	}
	c := callPool.Get().(*sharedCall)
	c.prepare(m, x, ldx, kk, ps)
	parallel.For(c.first[len(ps)], m*kk*c.k.cols, parallel.MinProduct, c.run)
	c.release()
	callPool.Put(c)
}

// actFormat is how x is quantized for a weight format: K-quant blocks, or 32-value
// blocks with a lane mode.
type actFormat struct {
	kq   bool
	mode int
}

// sharedCall is one MulAddShared's state. It is pooled with the activation buffers it
// quantized x into, and run is bound once, so a call allocates neither.
type sharedCall struct {
	k     *kernelSet
	ps    []Product // a copy, so the caller's slice may live on its stack
	xs    []*acts   // the activations product i reads
	first []int     // product i's units (k.cols columns each) are first[i] to first[i+1]
	fmts  []actFormat
	bufs  []*acts // bufs[f] holds x quantized as fmts[f]
	run   func(lo, hi int)
}

var callPool = sync.Pool{New: func() any {
	c := new(sharedCall)
	c.run = c.units
	return c
}}

// prepare quantizes x once per activation format and numbers the units.
func (c *sharedCall) prepare(m int, x []float32, ldx, kk int, ps []Product) {
	c.k = kernels()
	c.ps = append(c.ps[:0], ps...)
	c.xs, c.fmts = c.xs[:0], c.fmts[:0]
	c.first = append(c.first[:0], 0)
	for _, p := range ps {
		f := actFormat{kq: formats[p.W.t].block == qkK}
		if !f.kq {
			f.mode = laneMode(p.W.t)
		}
		fi := 0
		for fi < len(c.fmts) && c.fmts[fi] != f {
			fi++
		}
		if fi == len(c.fmts) {
			c.fmts = append(c.fmts, f)
			if fi == len(c.bufs) {
				c.bufs = append(c.bufs, new(acts))
			}
			if f.kq {
				c.bufs[fi].quantizeK(m, x, ldx, kk, c.k.rowK)
			} else {
				c.bufs[fi].quantize32(m, x, ldx, kk, f.mode, c.k.row32)
			}
		}
		c.xs = append(c.xs, c.bufs[fi])
		c.first = append(c.first, c.first[len(c.first)-1]+(p.W.n+c.k.cols-1)/c.k.cols)
	}
}

// units computes units [lo, hi), numbered through the products in order.
func (c *sharedCall) units(lo, hi int) {
	cols := c.k.cols
	for i, p := range c.ps {
		a, b := max(lo, c.first[i]), min(hi, c.first[i+1])
		if a < b {
			c.k.mul(p.W, c.xs[i], (a-c.first[i])*cols, min(p.W.n, (b-c.first[i])*cols), p.Out, p.Ldo)
		}
	}
}

// release drops the call's references to the caller's weights and outputs, so the
// pool pins only its own buffers.
func (c *sharedCall) release() {
	clear(c.ps)
	clear(c.xs)
}
