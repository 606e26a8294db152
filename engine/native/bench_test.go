package native

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/engine"
)

// BenchmarkFMAPeak measures one core's peak: 12 independent 8-wide FMAs per loop.
func BenchmarkFMAPeak(b *testing.B) {
	if !haveAsm {
		b.Skip("no AVX2/FMA")
	}
	const iters = 1 << 20
	start := time.Now()
	for b.Loop() {
		fmaPeak(iters)
	}
	flops := float64(b.N) * iters * 12 * 16
	b.ReportMetric(flops/time.Since(start).Seconds()/1e9, "GFLOP/s")
}

// peakGFLOPS measures the FMA peak for about 20 ms, best of three, so that a matmul
// figure can be compared with the peak the core had at that moment.
func peakGFLOPS() float64 {
	if !haveAsm {
		return 0
	}
	best := 0.0
	for range 3 {
		const iters = 1 << 20
		start := time.Now()
		fmaPeak(iters)
		best = max(best, iters*12*16/time.Since(start).Seconds()/1e9)
	}
	return best
}

// BenchmarkMatmul measures C += A*W at the model's shapes, on one core (the figure to
// hold against the FMA peak) and on all of them.
func BenchmarkMatmul(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, sh := range []struct{ m, k, n int }{
		{256, 384, 1024}, // small: prefill chunk through the MLP up-projection
		{256, 1024, 384}, // small: down-projection
		{1, 384, 1024},   // a single decode row
		{8, 128, 100277}, // tiny: logits for a decode batch of 8
	} {
		w := newPacked(sh.k, sh.n)
		copy(w.data, randSlice(r, len(w.data)))
		a := randSlice(r, sh.m*sh.k)
		ldc := w.panels * panelWidth
		c := make([]float32, sh.m*ldc)
		for _, procs := range []int{1, runtime.GOMAXPROCS(0)} {
			name := fmt.Sprintf("m=%d,k=%d,n=%d/cores=%d", sh.m, sh.k, sh.n, procs)
			b.Run(name, func(b *testing.B) {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
				peak := peakGFLOPS()
				start := time.Now()
				for b.Loop() {
					gemm(sh.m, a, sh.k, w, c, ldc)
				}
				flops := 2 * float64(sh.m) * float64(sh.k) * float64(sh.n) * float64(b.N)
				gflops := flops / time.Since(start).Seconds() / 1e9
				b.ReportMetric(gflops, "GFLOP/s")
				if peak > 0 {
					// Against one core's peak measured just before, on the same core count.
					b.ReportMetric(100*gflops/(peak*float64(procs)), "%peak")
				}
			})
		}
	}
}

// BenchmarkPrefill measures prompt tokens per second through Engine.Prefill, with a
// fresh prompt each time so the prefix cache never helps.
func BenchmarkPrefill(b *testing.B) {
	for _, model := range []string{"tiny", "small"} {
		b.Run(model, func(b *testing.B) {
			e := benchEngine(b, model)
			const n = 512
			i := uint32(0)
			start := time.Now()
			for b.Loop() {
				i++
				x, err := e.Prefill(context.Background(), engine.Request{Prompt: testPrompt(n, 1000+i)})
				if err != nil {
					b.Fatal(err)
				}
				x.Release()
			}
			b.ReportMetric(float64(n*b.N)/time.Since(start).Seconds(), "tokens/s")
		})
	}
}

// BenchmarkDecode measures generated tokens per second with batch sequences decoding
// together (after their prefill, which is excluded).
func BenchmarkDecode(b *testing.B) {
	for _, model := range []string{"tiny", "small"} {
		for _, batch := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/batch=%d", model, batch), func(b *testing.B) {
				e := benchEngine(b, model)
				const steps = 32
				var elapsed time.Duration
				salt := uint32(0)
				for b.Loop() {
					streams := make([]engine.Stream, batch)
					for j := range streams {
						salt++
						st, err := e.Generate(context.Background(), engine.Request{Prompt: testPrompt(64, salt), MaxTokens: steps + 1})
						if err != nil {
							b.Fatal(err)
						}
						streams[j] = st
					}
					// The first token of each closes its prefill; time the rest.
					for _, st := range streams {
						if _, err := st.Next(context.Background()); err != nil {
							b.Fatal(err)
						}
					}
					start := time.Now()
					for _, st := range streams {
						for range steps {
							if _, err := st.Next(context.Background()); err != nil {
								b.Fatal(err)
							}
						}
					}
					elapsed += time.Since(start)
				}
				b.ReportMetric(float64(batch*steps*b.N)/elapsed.Seconds(), "tokens/s")
			})
		}
	}
}

func benchEngine(b *testing.B, model string) *Engine {
	b.Helper()
	e, err := New(Config{Model: model})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	return e
}

// BenchmarkStartup is New for each model: weight generation and fingerprinting.
func BenchmarkStartup(b *testing.B) {
	for _, model := range []string{"tiny", "small"} {
		b.Run(model, func(b *testing.B) {
			for b.Loop() {
				e, err := New(Config{Model: model})
				if err != nil {
					b.Fatal(err)
				}
				e.Close()
			}
		})
	}
}

// BenchmarkAnswer is one request end to end: a 100-token prompt answered with 64
// greedy tokens, on an otherwise idle engine.
func BenchmarkAnswer(b *testing.B) {
	for _, model := range []string{"tiny", "small"} {
		b.Run(model, func(b *testing.B) {
			e := benchEngine(b, model)
			salt := uint32(5000)
			for b.Loop() {
				salt++
				st, err := e.Generate(context.Background(), engine.Request{Prompt: testPrompt(100, salt), MaxTokens: 64})
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for {
					if _, err := st.Next(context.Background()); err != nil {
						break
					}
					n++
				}
				if n != 64 {
					b.Fatalf("%d tokens", n)
				}
			}
		})
	}
}
