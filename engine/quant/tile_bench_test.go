//go:build amd64

package quant

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/tandem-serve/tandem/gguf"
)

// BenchmarkTile runs one tile kernel on cached data: cycles per block-row-column
// (at the clock cpu-GHz) say how close the kernel is to its port limits.
func BenchmarkTile(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	const k, m = 1536, 4
	w, _ := testMatrix(b, gguf.TypeQ8_0, k, 4, r)
	x := gaussian(r, m*k, 1)
	var a acts
	a.quantize32(m, x, k, k, laneMode(gguf.TypeQ8_0), quantRow32Go)
	tb := new(tileBuf)
	nbp := a.nbp
	tb.col = make([]byte, a.nb*256)
	tb.dw = make([]float32, 4*nbp)
	tb.dm = make([]float32, 4*nbp)
	tb.hd = make([]uint16, nbp)
	tb.hm = make([]uint16, nbp)
	for c := range 4 {
		prep32(w.t, &w.row(c)[0], a.nb, &tb.col[64*c], &tb.hd[0], &tb.hm[0])
		cvtHalves(&tb.hd[0], nbp, &tb.dw[c*nbp])
	}
	out := make([]float32, m*4)
	p := dot32Args{
		nb: a.nb, x: unsafe.Pointer(&a.x[0]), ldx: a.nb * xBlock,
		dx: unsafe.Pointer(&a.d[0]), ldd: 4 * nbp,
		col: unsafe.Pointer(&tb.col[0]),
		dw:  unsafe.Pointer(&tb.dw[0]), dm: unsafe.Pointer(&tb.dm[0]), ldw: 4 * nbp,
		out: unsafe.Pointer(&out[0]), ldo: 16,
		mask: unsafe.Pointer(&colMasks[4]), s: unsafe.Pointer(&tb.s[0]),
	}
	for _, v := range []struct {
		name         string
		ev, kind, rm int
	}{{"avx512z", 1, 3, 4}, {"avx512", 1, 0, 4}, {"avx2", 0, 0, 2}} {
		ev, kind, rm := v.ev, v.kind, v.rm
		b.Run(v.name, func(b *testing.B) {
			c0 := cpuTime()
			for b.Loop() {
				callDot32(ev, kind, rm, &p)
			}
			cpu := (cpuTime() - c0).Seconds()
			b.ReportMetric(cpu*2.8e9/float64(b.N*a.nb*rm*4), "cycles/block/row/col@2.8GHz")
		})
	}
}

// BenchmarkDirect runs the direct (decode) kernels on a few columns that stay in L1:
// the compute cost per block and column, without the memory system.
func BenchmarkDirect(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, typ := range []gguf.Type{gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ5_0} {
		for _, k := range []int{576, 4608} {
			n := 16 * 576 / k
			w, _ := testMatrix(b, typ, k, n, r)
			x := gaussian(r, k, 1)
			type variant struct {
				ks *kernelSet
				z  bool
			}
			var vs []variant
			for _, ks := range supportedKernels()[:len(supportedKernels())-1] {
				vs = append(vs, variant{ks, false})
				if ks == avx512Kernels {
					vs = append(vs, variant{ks, true})
				}
			}
			for _, v := range vs {
				ks := v.ks
				name := ks.name
				if v.z {
					name += "z"
				}
				b.Run(fmt.Sprintf("%v/K%d/%s", typ, k, name), func(b *testing.B) {
					defer func(z bool) { directZ = z }(directZ)
					directZ = v.z
					var a acts
					a.quantize32(1, x, k, k, laneMode(typ), ks.row32)
					out := make([]float32, n)
					c0 := cpuTime()
					for b.Loop() {
						mulDirect(ks == avx512Kernels, w, &a, 0, a.m, 0, n, out, n)
					}
					cpu := (cpuTime() - c0).Seconds()
					b.ReportMetric(cpu*2.8e9/float64(b.N*a.nb*n), "cycles/block/col@2.8GHz")
				})
			}
		}
	}
}

// BenchmarkDirectK runs one row of a K-quant with AVX-512 on columns that stay in L1:
// the direct kernels (directk.go) against preparing the columns for the tile kernel.
func BenchmarkDirectK(b *testing.B) {
	if !hasAVX512 {
		b.Skip("no AVX-512")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, typ := range []gguf.Type{gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K} {
		for _, k := range []int{1536, 4608} {
			n := 8
			if k > 2048 {
				n = 4
			}
			w, _ := testMatrix(b, typ, k, n, r)
			x := gaussian(r, k, 1)
			for _, direct := range []bool{false, true} {
				name := "prep"
				if direct {
					name = "direct"
				}
				b.Run(fmt.Sprintf("%v/K%d/%s", typ, k, name), func(b *testing.B) {
					defer func(d bool) { directK = d }(directK)
					directK = direct
					var a acts
					a.quantizeK(1, x, k, k, quantRowKAsm)
					out := make([]float32, n)
					c0 := cpuTime()
					for b.Loop() {
						mulAsm(true, w, &a, 0, n, out, n)
					}
					cpu := (cpuTime() - c0).Seconds()
					b.ReportMetric(cpu*2.8e9/float64(b.N*a.nb*n), "cycles/superblock/col@2.8GHz")
				})
			}
		}
	}
}

// BenchmarkDirectKStream is BenchmarkMulAddStream's decode from memory for the
// K-quants, with the direct kernels and with prepared columns.
func BenchmarkDirectKStream(b *testing.B) {
	if !hasAVX512 {
		b.Skip("no AVX-512")
	}
	r := rand.New(rand.NewPCG(1, 1))
	for _, typ := range []gguf.Type{gguf.TypeQ4_K, gguf.TypeQ6_K} {
		const k, n, mats = 2048, 2048, 30
		ws := make([]*Matrix, mats)
		bytes := 0
		for i := range ws {
			ws[i], _ = testMatrix(b, typ, k, n, r)
			bytes += len(ws[i].data)
		}
		x := gaussian(r, k, 1)
		out := make([]float32, n)
		for _, direct := range []bool{false, true, false, true} {
			name := "prep"
			if direct {
				name = "direct"
			}
			b.Run(fmt.Sprintf("%v/K%d_N%d/x%d/%s", typ, k, n, mats, name), func(b *testing.B) {
				defer func(d bool) { directK = d }(directK)
				directK = direct
				for b.Loop() {
					for _, w := range ws {
						w.MulAdd(1, x, k, out, n)
					}
				}
				b.ReportMetric(float64(bytes*b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}
