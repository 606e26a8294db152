package native

import (
	"math"

	"github.com/tandem-serve/tandem/internal/parallel"
)

// attnPlan is how a forward pass's attention is cut into work items: the same for
// every layer, so made once per pass.
type attnPlan struct {
	segs  []segment // split into runs of at most attnRows query rows
	items []attnItem
	cost  int // per item, for the split among the cores
}

type attnItem struct{ seg, head int }

func (m *model) planAttention(segs []segment) attnPlan {
	mc := m.mc
	cost := 0
	for _, s := range segs {
		cost += s.n * (s.pos0 + s.n)
	}
	p := attnPlan{segs: splitRows(segs)}
	p.items = make([]attnItem, 0, len(p.segs)*mc.Heads)
	for si := range p.segs {
		for h := range mc.Heads {
			p.items = append(p.items, attnItem{si, h})
		}
	}
	p.cost = cost * mc.HeadDim / max(len(p.segs), 1)
	return p
}

// attention computes causal grouped-query attention for every segment and query head,
// reading K and V from the paged store (the batch's own K and V are already there).
// Queries arrive rotated and pre-scaled by 1/sqrt(head dim).
//
// Rows are taken 6 at a time; each key block is one or two micro-kernel calls for
// Q*K^T and for P*V, with a streaming ("online") softmax in between, so no score
// matrix longer than a block is ever held. A row's arithmetic is the same whatever
// rows share its tile: fully masked blocks add exact zeros.
func (m *model) attention(layer int, qkv []float32, ldq int, out []float32, p attnPlan) {
	mc := m.mc
	ldo := mc.Heads * mc.HeadDim
	group := mc.Heads / mc.KVHeads
	parallel.For(len(p.items), p.cost, parallel.MinWork, func(lo, hi int) {
		sc, _ := m.attnScratch.Get().(*attnScratch)
		if sc == nil {
			sc = newAttnScratch(m.blockSize, m.kvDim)
		}
		defer m.attnScratch.Put(sc)
		for _, it := range p.items[lo:hi] {
			s := p.segs[it.seg]
			q := qkv[s.row0*ldq+it.head*mc.HeadDim:]
			o := out[s.row0*ldo+it.head*mc.HeadDim:]
			m.attendHead(sc, layer, it.head/group, s, q, ldq, o, ldo)
		}
	})
}

// attnRows is the most query rows of one segment one work item takes: a prompt's
// heads alone (9 for SmolLM2) are too few items to share evenly among the cores.
// A multiple of maxRows, so the tiles are those of the whole segment.
const attnRows = 8 * maxRows

// splitRows cuts long segments into runs of attnRows query rows (each attends to
// everything before it, as it did inside the whole segment).
func splitRows(segs []segment) []segment {
	long := false
	for _, s := range segs {
		long = long || s.n > attnRows
	}
	if !long {
		return segs
	}
	var out []segment
	for _, s := range segs {
		for r0 := 0; r0 < s.n; r0 += attnRows {
			out = append(out, segment{blocks: s.blocks, pos0: s.pos0 + r0, n: min(attnRows, s.n-r0), row0: s.row0 + r0})
		}
	}
	return out
}

type attnScratch struct {
	s, p, o   []float32
	mx, denom []float32
}

func newAttnScratch(bs, hd int) *attnScratch {
	return &attnScratch{
		s:     make([]float32, maxRows*bs),
		p:     make([]float32, maxRows*bs),
		o:     make([]float32, maxRows*hd),
		mx:    make([]float32, maxRows),
		denom: make([]float32, maxRows),
	}
}

func (m *model) attendHead(sc *attnScratch, layer, kvh int, s segment, q []float32, ldq int, out []float32, ldo int) {
	bs, hd, kd := m.blockSize, m.mc.HeadDim, m.kvDim
	negInf := float32(math.Inf(-1))
	win, softcapAt := 0, m.mc.arch.attnSoftcap
	if m.mc.arch.sliding(layer) {
		win = m.mc.arch.window
	}
	for t0 := 0; t0 < s.n; t0 += maxRows {
		mr := min(maxRows, s.n-t0)
		o := sc.o[:mr*kd]
		clear(o)
		for i := range mr {
			sc.mx[i], sc.denom[i] = negInf, 0
		}
		qa := q[t0*ldq:]
		last := s.pos0 + t0 + mr - 1
		b0 := 0
		if win > 0 { // blocks wholly before the first row's window are skipped
			b0 = max(0, s.pos0+t0-win+1) / bs
		}
		for b := b0; b <= last/bs; b++ {
			kb, vb := m.headKV(s.blocks[b], layer, kvh)
			sm := sc.s[:mr*bs]
			clear(sm)
			for sp := 0; sp < bs/panelWidth; sp++ {
				microKernel(mr, hd, qa, ldq, kb[sp*kd*panelWidth:], sm[sp*panelWidth:], bs)
			}
			p := sc.p[:mr*bs]
			for i := range mr {
				pos := s.pos0 + t0 + i
				valid := min(bs, pos-b*bs+1) // causal: slots after pos are masked
				first := 0
				if win > 0 { // and slots a window or more before it
					first = max(0, pos-win+1-b*bs)
				}
				prow := p[i*bs : (i+1)*bs]
				if valid <= first {
					clear(prow)
					continue
				}
				srow := sm[i*bs+first : i*bs+valid]
				if softcapAt != 0 {
					softcap(srow, softcapAt)
				}
				bm := srow[0]
				for _, v := range srow[1:] {
					bm = max(bm, v)
				}
				newMax := max(sc.mx[i], bm)
				corr := expf(sc.mx[i] - newMax)
				var sum float32
				expSub(prow[first:], srow, newMax, 1)
				for _, e := range prow[first:valid] {
					sum += e
				}
				clear(prow[:first])
				clear(prow[valid:])
				sc.denom[i] = sc.denom[i]*corr + sum
				sc.mx[i] = newMax
				if corr != 1 {
					orow := o[i*kd : (i+1)*kd]
					for j := range orow {
						orow[j] *= corr
					}
				}
			}
			for dp := 0; dp < kd/panelWidth; dp++ {
				microKernel(mr, bs, p, bs, vb[dp*bs*panelWidth:], o[dp*panelWidth:], kd)
			}
		}
		for i := range mr {
			inv := 1 / sc.denom[i]
			dst := out[(t0+i)*ldo : (t0+i)*ldo+hd]
			for j, v := range o[i*kd : i*kd+hd] {
				dst[j] = v * inv
			}
		}
	}
}
