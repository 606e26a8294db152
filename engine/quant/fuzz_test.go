package quant

import (
	"encoding/binary"
	"math"
	"testing"
)

// sameBits is bit equality, except that any NaN equals any NaN (payloads may differ
// between Go's float64 emulation and the hardware).
func sameBits(a, b float32) bool {
	if a != a && b != b {
		return true
	}
	return math.Float32bits(a) == math.Float32bits(b)
}

// FuzzMulAdd feeds arbitrary bytes as weights (NaN and infinite scales included) and
// as activations to Dequantize, Row and MulAdd: they must not panic, and the active
// kernels must give the portable kernels' bits.
func FuzzMulAdd(f *testing.F) {
	f.Add(uint8(0), uint8(1), uint8(2), uint8(1), []byte("weights"), []byte{0, 0, 0x80, 0x3f})
	f.Add(uint8(5), uint8(1), uint8(3), uint8(2), []byte{0xff, 0x7c, 0xff, 0xff}, []byte{0, 0, 0xc0, 0x7f})
	f.Add(uint8(7), uint8(2), uint8(1), uint8(7), []byte{0x00, 0x7e, 1, 2, 3}, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	f.Fuzz(func(t *testing.T, ti, kb, n, m uint8, wbytes, xbytes []byte) {
		typ := matrixTypes[int(ti)%len(matrixTypes)]
		k := (int(kb)%4 + 1) * typ.BlockElems()
		cols := int(n)%9 + 1
		rows := int(m) % 9
		rb, _ := typ.RowBytes(k)
		data := make([]byte, cols*rb)
		for i := range data {
			if len(wbytes) > 0 {
				data[i] = wbytes[i%len(wbytes)] ^ byte(i/len(wbytes))
			}
		}
		if err := Dequantize(typ, data, make([]float32, cols*k)); err != nil {
			t.Fatal(err)
		}
		w, err := NewMatrix(typ, k, cols, data)
		if err != nil {
			t.Fatal(err)
		}
		w.Row(cols-1, make([]float32, k))
		x := make([]float32, rows*k)
		for i := range x {
			if len(xbytes) >= 4 {
				p := 4 * i % (len(xbytes) - 3)
				x[i] = math.Float32frombits(binary.LittleEndian.Uint32(xbytes[p:]) + uint32(i))
			}
		}
		got := make([]float32, rows*cols)
		w.MulAdd(rows, x, k, got, cols)
		want := make([]float32, rows*cols)
		var a acts
		if formats[typ].block == qkK {
			a.quantizeK(rows, x, k, k, quantRowKGo)
		} else {
			a.quantize32(rows, x, k, k, laneMode(typ), quantRow32Go)
		}
		mulGo(w, &a, 0, cols, want, cols)
		for i := range got {
			if !sameBits(got[i], want[i]) {
				t.Fatalf("%v k=%d: out[%d] = %v, portable %v", typ, k, i, got[i], want[i])
			}
		}
	})
}
