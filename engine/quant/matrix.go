package quant

import (
	"fmt"
	"sync"

	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/internal/parallel"
)

// Matrix is N rows of K values in a quantized format, as a GGUF file stores a 2-D
// weight of dims {K, N}: row j holds output j's weights, K values as consecutive
// blocks. It reads its bytes in place and never writes them, so they can be a view of
// a read-only memory map. A Matrix is safe for concurrent use.
type Matrix struct {
	t        gguf.Type
	k, n     int
	rowBytes int
	data     []byte
}

// Supported reports whether Matrix computes products on weights of type t. F32, F16
// and BF16 weights are the f32 engine's business.
func Supported(t gguf.Type) bool {
	switch t {
	case gguf.TypeQ4_0, gguf.TypeQ4_1, gguf.TypeQ5_0, gguf.TypeQ5_1, gguf.TypeQ8_0,
		gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K:
		return true
	}
	return false
}

// NewMatrix wraps data, n rows of k values of type t. data must be exactly that size.
func NewMatrix(t gguf.Type, k, n int, data []byte) (*Matrix, error) {
	if !Supported(t) {
		return nil, fmt.Errorf("quant: no matrix product for tensor type %v", t)
	}
	if k <= 0 || n <= 0 {
		return nil, fmt.Errorf("quant: a %v matrix of %d x %d values has no values", t, n, k)
	}
	rb, err := t.RowBytes(k)
	if err != nil {
		return nil, fmt.Errorf("quant: rows of %d values: %w", k, err)
	}
	if len(data) != n*rb {
		return nil, fmt.Errorf("quant: a %v matrix of %d rows of %d values is %d bytes, not %d",
			t, n, k, n*rb, len(data))
	}
	return &Matrix{t: t, k: k, n: n, rowBytes: rb, data: data}, nil
}

// Type, K and N describe the matrix.
func (w *Matrix) Type() gguf.Type { return w.t }
func (w *Matrix) K() int          { return w.k }
func (w *Matrix) N() int          { return w.n }

// Row dequantizes row j (say, a token's embedding) into dst[:K].
func (w *Matrix) Row(j int, dst []float32) {
	if j < 0 || j >= w.n {
		panic(fmt.Sprintf("quant: row %d of a matrix of %d rows", j, w.n))
	}
	if err := Dequantize(w.t, w.row(j), dst[:w.k]); err != nil {
		panic(err) // unreachable: NewMatrix checked the geometry
	}
}

func (w *Matrix) row(j int) []byte { return w.data[j*w.rowBytes : (j+1)*w.rowBytes] }

// MulAdd adds x times the matrix's transpose to out: for i < m and j < N,
//
//	out[i*ldo+j] += sum over k < K of x[i*ldx+k] * W[j][k]
//
// with x's rows quantized once to 8 bits, as llama.cpp does. Each output depends only
// on its row of x and its row of W: the same bits whatever m is, whichever rows share
// the call and however the work is split among threads.
func (w *Matrix) MulAdd(m int, x []float32, ldx int, out []float32, ldo int) {
	if m <= 0 {
		if m < 0 {
			panic(fmt.Sprintf("quant: MulAdd of %d rows", m))
		}
		return
	}
	if ldx < w.k || ldo < w.n || len(x) < (m-1)*ldx+w.k || len(out) < (m-1)*ldo+w.n {
		panic(fmt.Sprintf("quant: MulAdd of %d rows of %d values (stride %d, %d given) into %d outputs (stride %d, %d given)",
			m, w.k, ldx, len(x), w.n, ldo, len(out)))
	}
	s := scratchPool.Get().(*acts)
	defer scratchPool.Put(s)
	k := kernels()
	if formats[w.t].block == qkK {
		s.quantizeK(m, x, ldx, w.k, k.rowK)
	} else {
		s.quantize32(m, x, ldx, w.k, laneMode(w.t), k.row32)
	}
	units := (w.n + k.cols - 1) / k.cols
	parallelFor(units, m*w.k*k.cols, func(lo, hi int) {
		k.mul(w, s, lo*k.cols, min(w.n, hi*k.cols), out, ldo)
	})
}

// minSplit is the work (multiply-adds) above which a product is split among the
// cores. A decode step's products are bound by reading the weights: a Q8_0 576 x 576
// matrix is 350 KB, some 25 µs from memory, well worth a goroutine; under the
// engine's 2^20 rule for f32 work no decode product but the output was split, and
// two threads decoded hardly faster than one.
const minSplit = 1 << 16

var scratchPool = sync.Pool{New: func() any { return new(acts) }}

// parallelFor runs fn over [0, n) split among the cores when the work, n units of
// cost multiply-adds each, is worth it (minSplit).
func parallelFor(n, cost int, fn func(lo, hi int)) {
	parallel.For(n, cost, minSplit, fn)
}
