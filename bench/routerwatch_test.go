package bench

import (
	"strings"
	"testing"
)

const routerMetrics = `# HELP tandem_router_isl_threshold_tokens The ISL gating threshold in force.
# TYPE tandem_router_isl_threshold_tokens gauge
tandem_router_isl_threshold_tokens 960
# HELP tandem_router_isl_threshold_moves_total Moves of the adaptive ISL threshold, by direction.
# TYPE tandem_router_isl_threshold_moves_total counter
tandem_router_isl_threshold_moves_total{direction="down"} 3
tandem_router_isl_threshold_moves_total{direction="up"} 2
# HELP tandem_router_isl_threshold_tokens_extra A metric whose name begins like the gauge's.
# TYPE tandem_router_isl_threshold_tokens_extra gauge
tandem_router_isl_threshold_tokens_extra 7
# TYPE tandem_router_gate_total counter
tandem_router_gate_total{class="local"} 14
tandem_router_gate_total{class="disagg"} 3
# TYPE tandem_router_routed_total counter
tandem_router_routed_total{worker="decode-0"} 17
`

// The figures are read by metric name and label, not by prefix: a metric whose
// name begins like the gauge's is not taken for it.
func TestParseGatingKeepsTheGatingFigures(t *testing.T) {
	s, err := parseGating(strings.NewReader(routerMetrics))
	if err != nil {
		t.Fatal(err)
	}
	want := `isl_threshold_tokens=960 isl_threshold_moves_total{direction="down"}=3 isl_threshold_moves_total{direction="up"}=2 ` +
		`gate_total{class="disagg"}=3 gate_total{class="local"}=14`
	if got := s.line(); got != want {
		t.Errorf("line = %q, want %q", got, want)
	}
	if _, err := parseGating(strings.NewReader("tandem_router_isl_threshold_tokens{ 1\n")); err == nil {
		t.Error("a malformed exposition parsed")
	}
}

// The path keeps the threshold at each change, both ways, and the report says it.
func TestGatingPathShowsBothDirections(t *testing.T) {
	g := &Gating{}
	for i, tok := range []float64{1024, 1024, 768, 512, 512, 768} {
		g.add(float64(i), gatingSample{threshold: tok, hasThresh: true,
			moves: map[string]float64{"down": float64(min(i, 3)), "up": float64(max(0, i-4))}, routed: map[string]float64{"local": float64(i)}})
	}
	want := "ISL threshold 1024 (0 s) -> 768 (2 s) -> 512 (3 s) -> 768 (5 s); moves 1 up, 3 down; routed by class local=5"
	if got := g.String(); got != want {
		t.Errorf("String = %q\nwant %q", got, want)
	}
	var b strings.Builder
	if err := writeGating(&b, []*Report{{Group: "threshold@1+1", Gating: g}, {Group: "threshold@1+1", Gating: g}}, ""); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "threshold@1+1 router: "+want+"\n" {
		t.Errorf("writeGating wrote %q", got)
	}
}
