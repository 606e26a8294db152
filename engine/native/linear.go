package native

import (
	"encoding/binary"
	"math"

	"github.com/tandem-serve/tandem/engine/quant"
)

// linear is a weight matrix applied to a batch of rows: c[i][0:outDim] += a[i] * W.
// Implementations may touch up to ldOut() columns of each output row (the packed f32
// kernel writes whole 16-column panels, adding zeros past outDim), so output buffers
// use a stride of at least ldOut.
type linear interface {
	mulAdd(m int, a []float32, lda int, c []float32, ldc int)
	inDim() int
	outDim() int
	ldOut() int
}

// packed implements linear with the f32 micro-kernels.
func (p *packed) mulAdd(m int, a []float32, lda int, c []float32, ldc int) {
	gemm(m, a, lda, p, c, ldc)
}
func (p *packed) inDim() int  { return p.K }
func (p *packed) outDim() int { return p.N }
func (p *packed) ldOut() int  { return p.panels * panelWidth }

// concat applies several matrices with the same input side by side, as one matrix
// whose output columns are theirs in order: Q, K and V, or gate and up, when they
// cannot be fused into one packed matrix (quantized weights keep their own blocks).
type concat struct {
	parts []linear
	offs  []int // output column of each part
	n     int
	// quant holds the parts' matrices when all are quantized: one shared product
	// then quantizes the input once and splits all their columns among the cores.
	quant []*quant.Matrix
}

func newConcat(parts ...linear) *concat {
	c := &concat{parts: parts}
	for _, p := range parts {
		c.offs = append(c.offs, c.n)
		c.n += p.outDim()
		if q, ok := p.(quantLinear); ok {
			c.quant = append(c.quant, q.m)
		}
	}
	if len(c.quant) != len(parts) {
		c.quant = nil
	}
	return c
}

func (c *concat) mulAdd(m int, a []float32, lda int, out []float32, ldc int) {
	if c.quant != nil {
		// On the stack for Q, K and V or gate and up: MulAddShared keeps no
		// reference to ps, and this runs for every layer of every decode step.
		var buf [4]quant.Product
		ps := buf[:0]
		for i, w := range c.quant {
			ps = append(ps, quant.Product{W: w, Out: out[c.offs[i]:], Ldo: ldc})
		}
		quant.MulAddShared(m, a, lda, ps)
		return
	}
	for i, p := range c.parts {
		p.mulAdd(m, a, lda, out[c.offs[i]:], ldc)
	}
}
func (c *concat) inDim() int  { return c.parts[0].inDim() }
func (c *concat) outDim() int { return c.n }

// ldOut leaves room for the last part's overhang. A packed part's padding columns
// are zero weights, so its overhang into the next part's columns adds exact zeros.
func (c *concat) ldOut() int {
	last := len(c.parts) - 1
	return max(c.n, c.offs[last]+c.parts[last].ldOut())
}

// rowSource yields one row of a [rows][dim] table: the token embedding lookup.
type rowSource interface {
	row(i int, dst []float32)
}

// columnsOf reads rows of a tied embedding from the packed output matrix, where
// token v's embedding is column v: stored once, gathered with a stride.
type columnsOf struct{ p *packed }

func (c columnsOf) row(tok int, dst []float32) {
	pan := c.p.panel(tok / panelWidth)
	j := tok % panelWidth
	for k := range dst {
		dst[k] = pan[k*panelWidth+j]
	}
}

// f32Rows reads rows of an F32 tensor in place (a view of the mapped file), so a
// separate token embedding costs no memory beyond the pages actually looked up.
type f32Rows struct {
	data []byte
	dim  int
}

func (r f32Rows) row(i int, dst []float32) {
	b := r.data[i*r.dim*4 : (i+1)*r.dim*4]
	for k := range dst {
		dst[k] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*k:]))
	}
}

// f16Rows and bf16Rows convert a row of a half-precision embedding on lookup.
type f16Rows struct {
	data []byte
	dim  int
}

func (r f16Rows) row(i int, dst []float32) {
	b := r.data[i*r.dim*2 : (i+1)*r.dim*2]
	for k := range dst {
		dst[k] = halfToFloat(binary.LittleEndian.Uint16(b[2*k:]))
	}
}

type bf16Rows struct {
	data []byte
	dim  int
}

func (r bf16Rows) row(i int, dst []float32) {
	b := r.data[i*r.dim*2 : (i+1)*r.dim*2]
	for k := range dst {
		dst[k] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*k:])) << 16)
	}
}

// halfToFloat converts an IEEE 754 binary16 value.
func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: normalise.
	e := uint32(113)
	for man&0x400 == 0 {
		man <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
}
