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
