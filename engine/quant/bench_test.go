package quant

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// The benchmark shapes are SmolLM2-135M's: d_model 576, SwiGLU 1536; m=1 is decode,
// m=8 decode batched over 8 sequences, m=512 a prompt. GFLOP/s counts
// 2*m*K*N flops; GB/s is the weight bytes read per second (once per call). The
// cpu-GFLOP/s figure divides by the process's CPU time instead of the wall clock:
// on a shared machine it is the figure that says what the kernels do when they run.
func BenchmarkMulAdd(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, typ := range matrixTypes {
		for _, shape := range []struct{ k, n int }{{576, 1536}, {1536, 576}} {
			if shape.k%typ.BlockElems() != 0 {
				continue
			}
			for _, m := range []int{1, 8, 512} {
				b.Run(fmt.Sprintf("%v/K%d_N%d/m%d", typ, shape.k, shape.n, m), func(b *testing.B) {
					w, _ := testMatrix(b, typ, shape.k, shape.n, r)
					x := gaussian(r, m*shape.k, 1)
					out := make([]float32, m*shape.n)
					cpu0 := cpuTime()
					for b.Loop() {
						w.MulAdd(m, x, shape.k, out, shape.n)
					}
					flops := 2 * float64(m*shape.k*shape.n) * float64(b.N)
					b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
					b.ReportMetric(float64(len(w.data)*b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
					if cpu := cpuTime() - cpu0; cpu > 0 {
						b.ReportMetric(flops/cpu.Seconds()/1e9, "cpu-GFLOP/s")
						b.ReportMetric(float64(len(w.data)*b.N)/cpu.Seconds()/1e9, "cpu-GB/s")
					}
				})
			}
		}
	}
}

// BenchmarkMulAddStream is m=1 over 30 matrices of 576 x 1536 used in turn (107 MB of
// Q8_0, more than the L3), as a decode step meets its weights: from memory, not cache.
// The K-quants take the down projection's shape, 1536 x 576 (K must be a multiple of
// 256).
func BenchmarkMulAddStream(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, typ := range matrixTypes {
		k, n, mats := 576, 1536, 30
		if k%typ.BlockElems() != 0 {
			k, n = n, k
		}
		b.Run(fmt.Sprintf("%v/K%d_N%d/x%d", typ, k, n, mats), func(b *testing.B) {
			ws := make([]*Matrix, mats)
			bytes := 0
			for i := range ws {
				ws[i], _ = testMatrix(b, typ, k, n, r)
				bytes += len(ws[i].data)
			}
			x := gaussian(r, k, 1)
			out := make([]float32, n)
			cpu0 := cpuTime()
			for b.Loop() {
				for _, w := range ws {
					w.MulAdd(1, x, k, out, n)
				}
			}
			b.ReportMetric(float64(bytes*b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			if cpu := cpuTime() - cpu0; cpu > 0 {
				b.ReportMetric(float64(bytes*b.N)/cpu.Seconds()/1e9, "cpu-GB/s")
			}
		})
	}
}
