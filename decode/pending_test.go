package decode

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
)

// series reads the gauge's series as label value -> value.
func series(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	return out
}

func TestPendingPrefills(t *testing.T) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pending"}, []string{"prefill_worker"})
	reg := prometheus.NewRegistry()
	reg.MustRegister(g)
	p := pendingPrefills{gauge: g}
	a := p.add("p1", 200)
	b := p.add("p1", 50)
	c := p.add("p2", 30)
	if p.of("p1") != 250 || p.of("p2") != 30 || p.of("p3") != 0 {
		t.Fatalf("pending p1 %d p2 %d p3 %d, want 250 30 0", p.of("p1"), p.of("p2"), p.of("p3"))
	}
	if got := series(t, reg); got["p1"] != 250 || got["p2"] != 30 || len(got) != 2 {
		t.Errorf("gauge %v, want p1 250 and p2 30", got)
	}
	a()
	a() // done twice counts once
	if p.of("p1") != 50 {
		t.Errorf("after one prefill is done p1 has %d pending, want 50", p.of("p1"))
	}
	b()
	c()
	if got := series(t, reg); len(got) != 0 {
		t.Errorf("gauge series %v left with nothing pending, want none", got)
	}
}

func TestRerankByPending(t *testing.T) {
	cand := func(id string, queued uint64, cachedBlocks uint32) *decodev1.PrefillCandidate {
		return &decodev1.PrefillCandidate{WorkerId: id, QueuedTokens: queued, CachedBlocks: cachedBlocks}
	}
	ids := func(cs []*decodev1.PrefillCandidate) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.GetWorkerId())
		}
		return out
	}
	all := func(string) bool { return true }
	var p pendingPrefills
	router := []*decodev1.PrefillCandidate{cand("a", 0, 0), cand("b", 0, 0), cand("c", 100, 0)}
	if got, moved := p.rerank(router, 512, 16, all); moved != "" || !slices.Equal(ids(got), []string{"a", "b", "c"}) {
		t.Errorf("nothing pending: order %v (moved %q), want the router's a b c", ids(got), moved)
	}

	done := p.add("a", 2048) // a burst this worker sent to a, not yet in a's load report
	got, moved := p.rerank(router, 512, 16, all)
	if moved != "a" || !slices.Equal(ids(got), []string{"b", "a", "c"}) {
		t.Errorf("2048 tokens pending at a: order %v (moved %q), want b a c with a displaced", ids(got), moved)
	}
	if !slices.Equal(ids(router), []string{"a", "b", "c"}) {
		t.Errorf("rerank changed the caller's slice to %v", ids(router))
	}

	// The router already counts what is pending: its report is at least as large.
	if got, moved := p.rerank([]*decodev1.PrefillCandidate{cand("a", 4096, 0), cand("b", 0, 0)}, 512, 16, all); moved != "" || got[0].GetWorkerId() != "a" {
		t.Errorf("router's queue covers the pending tokens: order %v (moved %q), want the router's", ids(got), moved)
	}
	// A cached prefix on a outweighs a short pending queue there.
	if got, moved := p.rerank([]*decodev1.PrefillCandidate{cand("a", 0, 200), cand("b", 0, 0)}, 4096, 16, all); moved != "" || got[0].GetWorkerId() != "a" {
		t.Errorf("a caches 3200 of 4096 tokens, 2048 pending: order %v (moved %q), want a first", ids(got), moved)
	}
	// A candidate discovery does not know is never moved ahead: the request would
	// fall back at once instead of trying the router's choice.
	if got, moved := p.rerank(router, 512, 16, func(id string) bool { return id != "b" }); moved != "a" || got[0].GetWorkerId() != "c" {
		t.Errorf("b unknown: order %v (moved %q), want c (100 queued) ahead of a (2048 pending)", ids(got), moved)
	}
	done()
	if got, _ := p.rerank(router, 512, 16, all); got[0].GetWorkerId() != "a" {
		t.Errorf("after a's prefill is done: first %s, want a", got[0].GetWorkerId())
	}
}

// Candidates the router ranked are re-ranked on the router's own terms: its cost
// plus what the tokens pending here beyond its report add at its queue weight.
func TestRerankOnRouterTerms(t *testing.T) {
	all := func(string) bool { return true }
	ranked := func(id string, cost, perToken float64, queued uint64) *decodev1.PrefillCandidate {
		return &decodev1.PrefillCandidate{WorkerId: id, Cost: cost, QueueCostPerToken: perToken, QueuedTokens: queued}
	}
	var p pendingPrefills
	done := p.add("a", 64)
	defer done()

	// 64 unseen tokens at queue weight 1 (1/16 a token) make a cost 14 against b's 12.
	got, moved := p.rerank([]*decodev1.PrefillCandidate{ranked("a", 10, 1.0/16, 0), ranked("b", 12, 1.0/16, 0)}, 512, 16, all)
	if moved != "a" || got[0].GetWorkerId() != "b" {
		t.Errorf("a at 10 + 64 unseen tokens, b at 12: first %s (moved %q), want b", got[0].GetWorkerId(), moved)
	}
	// At half that queue weight the same tokens add 2: a ties b at 12 and stays first.
	got, moved = p.rerank([]*decodev1.PrefillCandidate{ranked("a", 10, 1.0/32, 0), ranked("b", 12, 1.0/32, 0)}, 512, 16, all)
	if moved != "" || got[0].GetWorkerId() != "a" {
		t.Errorf("a at 10 + 2, b at 12: first %s (moved %q), want a (a tie keeps the router's order)", got[0].GetWorkerId(), moved)
	}
	// queue_weight 0: cache affinity alone; pending work changes nothing.
	got, moved = p.rerank([]*decodev1.PrefillCandidate{ranked("a", 10, 0, 0), ranked("b", 12, 0, 0)}, 512, 16, all)
	if moved != "" || got[0].GetWorkerId() != "a" {
		t.Errorf("queue weight 0: first %s (moved %q), want the router's a", got[0].GetWorkerId(), moved)
	}
	// The router already heard of the pending tokens (a reports 64 queued): nothing unseen.
	got, moved = p.rerank([]*decodev1.PrefillCandidate{ranked("a", 14, 1.0/16, 64), ranked("b", 15, 1.0/16, 0)}, 512, 16, all)
	if moved != "" || got[0].GetWorkerId() != "a" {
		t.Errorf("pending already reported: first %s (moved %q), want the router's a", got[0].GetWorkerId(), moved)
	}
}
