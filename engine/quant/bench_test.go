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
