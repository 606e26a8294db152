package native

// expSubAVX2 sets dst[i] = expf(sign*src[i] - m) for the first n - n%8 values, eight
// at a time, with the scalar expf's operations in its order and roundings (no fused
// multiply-add), so the results are the same bits. It returns false, having written
// an unspecified part of dst, when some x exceeds 88, where expf calls math.Exp.
//
//go:noescape
func expSubAVX2(dst, src *float32, n int, m, sign float32) bool

// expSub sets dst[i] = expf(sign*src[i] - m) for i < len(src): the softmax's and
// SwiGLU's exponentials, which were a tenth of a prompt's time one at a time.
func expSub(dst, src []float32, m, sign float32) {
	n := len(src)
	dst = dst[:n]
	done := 0
	if haveAsm && n >= 8 && expSubAVX2(&dst[0], &src[0], n, m, sign) {
		done = n - n%8
	}
	for i := done; i < n; i++ {
		dst[i] = expf(sign*src[i] - m)
	}
}
