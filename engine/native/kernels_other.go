//go:build !amd64

package native

const haveAsm = false

func microKernel(mr, k int, a []float32, lda int, b []float32, c []float32, ldc int) {
	kernelGo(mr, k, a, lda, b, c, ldc)
}

func kernelAsm(mr, k int, a []float32, lda int, b []float32, c []float32, ldc int) {
	kernelGo(mr, k, a, lda, b, c, ldc)
}

func fmaPeak(n int) {}

func expSub(dst, src []float32, m, sign float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = expf(sign*v - m)
	}
}
