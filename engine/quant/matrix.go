package quant

import (
	"fmt"

	"github.com/tandem-serve/tandem/gguf"
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
	MulAddShared(m, x, ldx, []Product{{W: w, Out: out, Ldo: ldo}})
}
