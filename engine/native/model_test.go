package native

import (
	"math"
	"testing"

	"github.com/tandem-serve/tandem/kvcache"
)

func testPrompt(n int, salt uint32) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = (uint32(i)*7919 + salt*104729) % VocabSize
	}
	return p
}

// Incremental decoding over the paged cache must give the logits of recomputing the
// whole sequence from scratch.
func TestIncrementalMatchesRecompute(t *testing.T) {
	e := newTestEngine(t, Config{NumBlocks: 64})
	m := e.model
	tokens := testPrompt(53, 1) // crosses block boundaries mid-way
	blocks, ok := e.pool.Allocate(nil, 8)
	if !ok {
		t.Fatal("no blocks")
	}
	defer e.pool.Release(blocks)
	ws := m.newWorkspace(len(tokens), 1)
	// Incremental: a 20-token prefill, then one token at a time.
	const first = 20
	inc := map[int][]float32{}
	lg := m.forward(ws, tokens[:first], []segment{{blocks: blocks, n: first, logits: true}})
	inc[first-1] = append([]float32(nil), lg[0]...)
	for p := first; p < len(tokens); p++ {
		lg := m.forward(ws, tokens[p:p+1], []segment{{blocks: blocks, pos0: p, n: 1, logits: true}})
		inc[p] = append([]float32(nil), lg[0]...)
	}
	// Recompute from scratch into other blocks for several prefix lengths.
	other, ok := e.pool.Allocate(nil, 8)
	if !ok {
		t.Fatal("no blocks")
	}
	defer e.pool.Release(other)
	for _, p := range []int{first - 1, 31, 32, 47, len(tokens) - 1} {
		lg := m.forward(ws, tokens[:p+1], []segment{{blocks: other, n: p + 1, logits: true}})
		var worst float64
		for v := range VocabSize {
			worst = max(worst, math.Abs(float64(lg[0][v]-inc[p][v])))
		}
		if worst > 1e-4 {
			t.Errorf("position %d: incremental and recomputed logits differ by %g", p, worst)
		}
	}
}

// A batch of segments from different sequences must compute each exactly as alone.
func TestBatchedForwardMatchesSingle(t *testing.T) {
	e := newTestEngine(t, Config{NumBlocks: 64})
	m := e.model
	a, b := testPrompt(21, 2), testPrompt(60, 3) // b: longer than attnRows
	ba, _ := e.pool.Allocate(nil, 4)
	bb, _ := e.pool.Allocate(nil, 4)
	ws := m.newWorkspace(96, 2)
	single := func(blocks []kvcache.BlockID, toks []uint32) []float32 {
		lg := m.forward(ws, toks, []segment{{blocks: blocks, n: len(toks), logits: true}})
		return append([]float32(nil), lg[0]...)
	}
	wantA, wantB := single(ba, a), single(bb, b)
	ca, _ := e.pool.Allocate(nil, 4)
	cb, _ := e.pool.Allocate(nil, 4)
	toks := append(append([]uint32(nil), a...), b...)
	lg := m.forward(ws, toks, []segment{
		{blocks: ca, n: len(a), logits: true},
		{blocks: cb, n: len(b), row0: len(a), logits: true},
	})
	for v := range VocabSize {
		if lg[0][v] != wantA[v] || lg[1][v] != wantB[v] {
			t.Fatalf("token %d: batched logits (%v, %v) differ from single (%v, %v)", v, lg[0][v], lg[1][v], wantA[v], wantB[v])
		}
	}
}
