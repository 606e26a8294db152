package main

import (
	"bytes"
	"fmt"
	"math"
)

// data emits a read-only constant of repeated bytes.
func (g *gen) data(name string, b []byte) {
	for i := 0; i < len(b); i += 8 {
		var v uint64
		for k := 7; k >= 0; k-- {
			v = v<<8 | uint64(b[i+k])
		}
		fmt.Fprintf(&g.b, "DATA %s<>+%d(SB)/8, $0x%016x\n", name, i, v)
	}
	fmt.Fprintf(&g.b, "GLOBL %s<>(SB), RODATA|NOPTR, $%d\n", name, len(b))
}

func rep(v byte, n int) []byte { return bytes.Repeat([]byte{v}, n) }

func words(v uint16, n int) []byte {
	b := make([]byte, 0, 2*n)
	for range n {
		b = append(b, byte(v), byte(v>>8))
	}
	return b
}

func (g *gen) constants() {
	g.data("c80", rep(0x80, 32))
	g.data("z80", rep(0x80, 64))
	g.data("z0f", rep(0x0f, 64))
	g.data("z10", rep(0x10, 64))
	g.data("zsrl4", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0})
	g.data("c01", rep(0x01, 32))
	g.data("c0f", rep(0x0f, 32))
	g.data("c08", rep(0x08, 32))
	g.data("c10", rep(0x10, 32))
	g.data("c30", rep(0x30, 32))
	g.data("ones16", words(1, 16))
	g.data("cm128", words(0xff80, 16))
	g.data("srl4", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0})
	var shuf, bits []byte
	for k := range 32 {
		shuf = append(shuf, byte(k/8%2+2*(k/16))) // within each 128-bit half: bytes 0,1 / 2,3
		bits = append(bits, 1<<(k%8))
	}
	g.data("qhshuf", shuf)
	g.data("qhbits", bits)
	g.data("packperm", []byte{0, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 5, 0, 0, 0,
		2, 0, 0, 0, 6, 0, 0, 0, 3, 0, 0, 0, 7, 0, 0, 0})
	g.data("absmask", []byte{0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0})
	g.data("i127", []byte{127, 0, 0, 0, 0, 0, 0, 0})
	g.data("f127", le32f(127))
	g.data("fm127", le32f(-127))
	g.data("f1", le32f(1))
	g.data("tiny", le32f(1e-30))
	for c := range 8 { // bcw<c>: word c of each 128-bit half in all its words
		var b []byte
		for range 16 {
			b = append(b, byte(2*c), byte(2*c+1))
		}
		g.data(fmt.Sprintf("bcw%d", c), b)
	}
	for k := range 4 { // q6pat<k>: word 2k in the low half's words, 2k+1 in the high's
		var b []byte
		for half := range 2 {
			for range 8 {
				w := 2*k + half
				b = append(b, byte(2*w), byte(2*w+1))
			}
		}
		g.data(fmt.Sprintf("q6pat%d", k), b)
	}

	for _, u := range unpackers32 {
		var idx []byte
		for k := range group {
			v := k * u.bytes
			idx = append(idx, byte(v), byte(v>>8), 0, 0)
		}
		g.data("gidx"+u.name, idx)
	}
	var mb, m8 []byte
	for n := 0; n <= 8; n++ {
		mb = append(mb, byte(1<<n-1))
	}
	for len(mb)%8 != 0 {
		mb = append(mb, 0)
	}
	for n := 0; n <= 8; n++ {
		for k := range 8 {
			var v byte
			if k < n {
				v = 0xff
			}
			m8 = append(m8, v, v, v, v)
		}
	}
	g.data("gmaskb", mb) // gmaskb[n]: a mask of the first n of 8 lanes
	g.data("gmask8", m8) // gmask8[n]: 8 dwords, the first n all ones
	var pd, pm []byte
	for half := range 2 {
		_ = half
		for k := range 16 {
			if k < 8 {
				pd = append(pd, byte(4*(k/2)+k%2))
				pm = append(pm, byte(4*(k/2)+k%2+2))
			} else {
				pd = append(pd, 0x80)
				pm = append(pm, 0x80)
			}
		}
	}
	g.data("pickd", pd) // the low half of each dword, packed into each 128-bit half's low 8 bytes
	g.data("pickm", pm) // the high half likewise
}

// le32f is a float32 constant's bytes, padded to 8.
func le32f(f float32) []byte {
	v := math.Float32bits(f)
	return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24), 0, 0, 0, 0}
}
