package native

import (
	"sync"

	"github.com/tandem-serve/tandem/internal/parallel"
	"github.com/tandem-serve/tandem/kvcache"
)

// model runs forward passes over a paged KV store. It is used by one goroutine at a
// time (the scheduler); importers and exports touch only blocks it is not using.
type model struct {
	mc          ModelConfig
	w           *weights
	ropes       []*ropeTable // per layer: Gemma 3's sliding layers have their own
	blockSize   int
	kvDim       int       // head dimension as stored: padded to whole panels
	blockFloats int       // floats per KV block: layers x kv heads x (K, V) x block x kvDim
	kv          []float32 // every block's K and V, block after block
	qkvLd       int       // row stride of the Q|K|V activations
	guLd        int       // row stride of the gate|up activations
	vocabPad    int       // row stride of the logits; only the first VocabSize are real
	// attnScratch holds *attnScratch: every layer of every pass takes one per
	// parallel chunk, too many small allocations to make afresh.
	attnScratch sync.Pool
}

func newModel(mc ModelConfig, w *weights, numBlocks, blockSize int) *model {
	kd := mc.kvDim()
	bf := mc.Layers * mc.KVHeads * 2 * blockSize * kd
	m := &model{
		mc:          mc,
		w:           w,
		ropes:       layerRopes(mc, w.ropeFreqs),
		blockSize:   blockSize,
		kvDim:       kd,
		blockFloats: bf,
		kv:          make([]float32, numBlocks*bf),
		vocabPad:    w.output.ldOut(),
	}
	for _, lw := range w.layers {
		m.qkvLd = max(m.qkvLd, lw.wqkv.ldOut())
		m.guLd = max(m.guLd, lw.wgu.ldOut())
	}
	return m
}

// The layout of a block (and of its exported bytes, little-endian f32): for each
// layer, for each KV head, K then V, each blockSize x kvDim floats. K is stored as
// 16-slot panels, [slot/16][dim][slot%16], and V as 16-dim panels,
// [dim/16][slot][dim%16], so that Q*K^T and P*V are both ordinary packed matrix
// products for the micro-kernel.
func (m *model) headKV(id kvcache.BlockID, layer, kvh int) (k, v []float32) {
	n := m.blockSize * m.kvDim
	base := int(id)*m.blockFloats + (layer*m.mc.KVHeads+kvh)*2*n
	return m.kv[base : base+n], m.kv[base+n : base+2*n]
}

func (m *model) block(id kvcache.BlockID) []float32 {
	return m.kv[int(id)*m.blockFloats : int(id+1)*m.blockFloats]
}

// segment is one sequence's share of a forward pass: n consecutive tokens starting
// at position pos0, rows row0.. of the batch.
type segment struct {
	blocks []kvcache.BlockID // the sequence's block table, covering pos0+n-1
	pos0   int
	n      int
	row0   int
	logits bool // compute logits for the last token
	// rows > 0 computes the logits of the first rows positions too and hands each
	// to onRow (the prompt's logprobs), a few rows at a time.
	rows  int
	onRow func(r int, logits []float32)
}

// workspace holds a forward pass's activations, sized for the largest batch.
type workspace struct {
	x, h, qkv, att, gu, act []float32
	hl, logits              []float32
}

func (m *model) newWorkspace(maxTokens, maxLogits int) *workspace {
	mc := m.mc
	return &workspace{
		x:      make([]float32, maxTokens*mc.DModel),
		h:      make([]float32, maxTokens*mc.DModel),
		qkv:    make([]float32, maxTokens*m.qkvLd),
		att:    make([]float32, maxTokens*mc.Heads*mc.HeadDim),
		gu:     make([]float32, maxTokens*m.guLd),
		act:    make([]float32, maxTokens*mc.FFN),
		hl:     make([]float32, maxLogits*mc.DModel),
		logits: make([]float32, maxLogits*m.vocabPad),
	}
}

// forward runs tokens (the concatenation of segs) through the model, writing their
// K and V into the sequences' blocks. It returns the logits of each segment that asks
// for them, in order, each row vocabPad long (only the first VocabSize are real).
func (m *model) forward(ws *workspace, tokens []uint32, segs []segment) [][]float32 {
	mc := m.mc
	d := mc.DModel
	T := len(tokens)
	x := ws.x[:T*d]
	for t, tok := range tokens {
		m.w.embed.row(int(tok), x[t*d:(t+1)*d])
	}
	if es := mc.arch.embedScale; es != 0 {
		for i := range x {
			x[i] *= es
		}
	}
	plan := m.planAttention(segs)
	for l := range m.w.layers {
		m.layer(ws, l, T, segs, plan)
	}
	for _, s := range segs {
		if s.rows > 0 {
			m.rowLogits(ws, x, s)
		}
	}
	n := 0
	for _, s := range segs {
		if s.logits {
			t := s.row0 + s.n - 1
			rmsNorm(ws.hl[n*d:(n+1)*d], x[t*d:(t+1)*d], m.w.finalNorm, mc.NormEps)
			n++
		}
	}
	V := m.vocabPad
	logits := ws.logits[:n*V]
	clear(logits)
	m.w.output.mulAdd(n, ws.hl, d, logits, V)
	out := make([][]float32, n)
	for i := range out {
		out[i] = logits[i*V : (i+1)*V]
		finishLogits(mc.arch, out[i][:mc.VocabSize])
	}
	return out
}

// rowLogits hands the logits of s's first s.rows positions to s.onRow, as many
// rows at a time as the workspace's logits hold: the hidden states are the
// prefill's own, so only the final norm and the output projection are added.
func (m *model) rowLogits(ws *workspace, x []float32, s segment) {
	mc := m.mc
	d, V := mc.DModel, m.vocabPad
	per := max(min(len(ws.logits)/V, len(ws.hl)/d), 1)
	for r0 := 0; r0 < s.rows; r0 += per {
		k := min(per, s.rows-r0)
		t0 := s.row0 + r0
		normRows(ws.hl[:k*d], x[t0*d:(t0+k)*d], k, d, m.w.finalNorm, mc.NormEps)
		logits := ws.logits[:k*V]
		clear(logits)
		m.w.output.mulAdd(k, ws.hl, d, logits, V)
		for i := range k {
			row := logits[i*V : i*V+mc.VocabSize]
			finishLogits(mc.arch, row)
			s.onRow(r0+i, row)
		}
	}
}

// normRows is rmsNorm over T rows of d, split among the cores for a prompt's rows:
// with the products split, a serial loop here would idle the other cores.
func normRows(dst, x []float32, T, d int, g []float32, eps float32) {
	parallel.For(T, 2*d, parallel.MinProduct, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			rmsNorm(dst[t*d:(t+1)*d], x[t*d:(t+1)*d], g, eps)
		}
	})
}

func (m *model) storeKV(id kvcache.BlockID, layer, kvh, slot int, k, v []float32) {
	kb, vb := m.headKV(id, layer, kvh)
	ko := (slot/panelWidth)*m.kvDim*panelWidth + slot%panelWidth
	for d, x := range k {
		kb[ko+d*panelWidth] = x
	}
	for d, x := range v {
		vb[(d/panelWidth)*m.blockSize*panelWidth+slot*panelWidth+d%panelWidth] = x
	}
}
