package decode

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
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
