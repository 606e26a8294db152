package quant

import "fmt"

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
// pay for waking the other cores. The outputs are the same bits as MulAdd's.
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
	k := kernels()
	// One quantized copy of x per activation format: K-quant blocks, or 32-value
	// blocks with a lane mode.
	type format struct {
		kq   bool
		mode int
	}
	xs := make([]*acts, len(ps))
	byFormat := map[format]*acts{}
	for i, p := range ps {
		f := format{kq: formats[p.W.t].block == qkK}
		if !f.kq {
			f.mode = laneMode(p.W.t)
		}
		s, ok := byFormat[f]
		if !ok {
			s = scratchPool.Get().(*acts)
			defer scratchPool.Put(s)
			if f.kq {
				s.quantizeK(m, x, ldx, kk, k.rowK)
			} else {
				s.quantize32(m, x, ldx, kk, f.mode, k.row32)
			}
			byFormat[f] = s
		}
		xs[i] = s
	}
	// Units of k.cols columns, numbered through the products in order.
	first := make([]int, len(ps)+1)
	for i, p := range ps {
		first[i+1] = first[i] + (p.W.n+k.cols-1)/k.cols
	}
	parallelFor(first[len(ps)], m*kk*k.cols, func(lo, hi int) {
		for i, p := range ps {
			a, b := max(lo, first[i]), min(hi, first[i+1])
			if a < b {
				k.mul(p.W, xs[i], (a-first[i])*k.cols, min(p.W.n, (b-first[i])*k.cols), p.Out, p.Ldo)
			}
		}
	})
}
