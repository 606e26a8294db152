//go:build !amd64

package native

const haveAsm = false

// gemmRows is how many rows of a prompt one micro-kernel call takes.
func gemmRows() int { return maxRows }

func microKernel(mr, k int, a []float32, lda int, b []float32, c []float32, ldc int) {
	kernelGo(mr, k, a, lda, b, c, ldc)
}

func kernelAsm(mr, k int, a []float32, lda int, b []float32, c []float32, ldc int) {
	kernelGo(mr, k, a, lda, b, c, ldc)
}

func fmaPeak(n int) {}

func rowPanels4(k int, a []float32, w *packed, p int, c []float32) {
	for q := p; q < p+4; q++ {
		kernelGo(1, k, a, k, w.panel(q), c[q*panelWidth:], 0)
	}
}

func expSub(dst, src []float32, m, sign float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = expf(sign*v - m)
	}
}
