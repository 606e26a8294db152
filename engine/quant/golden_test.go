package quant

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/tandem-serve/tandem/gguf"
)

// testdata/golden holds 4096 values (input.f32: sixteen 256-value groups of different
// shapes: uniform, gaussian, zeros, exact ties, outliers, all positive, all negative,
// tiny, huge, constant, sparse, ramps) and what ggml's reference code made of them
// (testdata/golden/README.md says how): <type>.bin from quantize_row_<type>_ref,
// <type>.f32 from dequantize_row_<type> of those bytes, f16.bin and bf16.bin from
// GGML_FP32_TO_FP16 and GGML_FP32_TO_BF16.
var goldenFiles = []struct {
	t    gguf.Type
	name string
}{
	{gguf.TypeQ4_0, "q4_0"}, {gguf.TypeQ4_1, "q4_1"}, {gguf.TypeQ5_0, "q5_0"},
	{gguf.TypeQ5_1, "q5_1"}, {gguf.TypeQ8_0, "q8_0"}, {gguf.TypeQ4_K, "q4_K"},
	{gguf.TypeQ5_K, "q5_K"}, {gguf.TypeQ6_K, "q6_K"}, {gguf.TypeQ8_K, "q8_K"},
	{gguf.TypeF16, "f16"}, {gguf.TypeBF16, "bf16"},
}

func readGolden(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "golden", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func floatsOf(b []byte) []float32 {
	f := make([]float32, len(b)/4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return f
}

func TestQuantizeMatchesGGML(t *testing.T) {
	in := floatsOf(readGolden(t, "input.f32"))
	for _, g := range goldenFiles {
		t.Run(g.name, func(t *testing.T) {
			want := readGolden(t, g.name+".bin")
			got, err := Quantize(g.t, in)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d bytes, ggml wrote %d", len(got), len(want))
			}
			bb := g.t.BlockBytes()
			for i := 0; i < len(want); i += bb {
				if !bytes.Equal(got[i:i+bb], want[i:i+bb]) {
					for k := i; ; k++ {
						if got[k] != want[k] {
							t.Fatalf("block %d (values %d..) byte %d: %#02x, ggml %#02x\n got %x\nwant %x",
								i/bb, i/bb*g.t.BlockElems(), k-i, got[k], want[k], got[i:i+bb], want[i:i+bb])
						}
					}
				}
			}
		})
	}
}

func TestDequantizeMatchesGGML(t *testing.T) {
	for _, g := range goldenFiles {
		if g.t == gguf.TypeF16 || g.t == gguf.TypeBF16 {
			continue
		}
		t.Run(g.name, func(t *testing.T) {
			want := floatsOf(readGolden(t, g.name+".f32"))
			got := make([]float32, len(want))
			if err := Dequantize(g.t, readGolden(t, g.name+".bin"), got); err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("value %d: %v (%#x), ggml %v (%#x)", i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
				}
			}
		})
	}
}
