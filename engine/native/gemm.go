package native

// Matrix multiply. Every product the model needs is C[m x N] += A[m x K] * W, with A
// row-major and W packed in 16-column panels. A micro-kernel computes up to 6 rows by
// one panel, holding the 6 x 16 accumulators in registers for the whole K loop.
//
// Each output element is summed over k in order, from zero, and then added to C,
// whatever the number of rows in its tile. So a row's result does not depend on which
// other rows share the call: batched decode, chunked prefill and a recompute all get
// bit-identical activations, which is what makes sampling reproducible across batches
// and across engine instances.

import "github.com/tandem-serve/tandem/internal/parallel"

const (
	maxRows   = 6  // rows per AVX2 micro-kernel call (12 with AVX-512: gemmRows)
	rowsBlock = 96 // rows of A per pass over a panel, so A stays in L2 while W streams
)

// gemm computes C += A * W for m rows. lda and ldc are row strides in elements; ldc
// must leave room for W's padded width (a multiple of 16).
func gemm(m int, a []float32, lda int, w *packed, c []float32, ldc int) {
	if m == 0 {
		return
	}
	k := w.K
	parallel.For(w.panels, m*k*panelWidth, parallel.MinProduct, func(lo, hi int) {
		if m == 1 && haveAsm {
			// Decode: four panels per call keep four independent FMA chains and
			// memory streams in flight; each output is summed as kern1 sums it.
			p := lo
			for ; p+4 <= hi; p += 4 {
				rowPanels4(k, a, w, p, c)
			}
			for ; p < hi; p++ {
				microKernel(1, k, a, lda, w.panel(p), c[p*panelWidth:], ldc)
			}
			return
		}
		rows := gemmRows()
		for r0 := 0; r0 < m; r0 += rowsBlock {
			r1 := min(m, r0+rowsBlock)
			for p := lo; p < hi; p++ {
				b := w.panel(p)
				for r := r0; r < r1; r += rows {
					mr := min(rows, r1-r)
					microKernel(mr, k, a[r*lda:], lda, b, c[r*ldc+p*panelWidth:], ldc)
				}
			}
		}
	})
}

// kernelGo is the portable micro-kernel: c[i][0:16] += sum over k of a[i][k] * b[k][0:16]
// for mr rows, the reference the assembly must match.
func kernelGo(mr, k int, a []float32, lda int, b []float32, c []float32, ldc int) {
	_ = b[k*panelWidth-1]
	for i := range mr {
		var acc [panelWidth]float32
		ai := a[i*lda : i*lda+k]
		for p, av := range ai {
			bp := b[p*panelWidth : p*panelWidth+panelWidth : p*panelWidth+panelWidth]
			for j := range panelWidth {
				acc[j] += av * bp[j]
			}
		}
		ci := c[i*ldc : i*ldc+panelWidth]
		for j := range panelWidth {
			ci[j] += acc[j]
		}
	}
}
