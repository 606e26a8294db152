package bench

import (
	"strings"
	"testing"
)

func TestRouterLineKeepsTheGatingFigures(t *testing.T) {
	in := `# HELP tandem_router_isl_threshold_tokens The ISL gating threshold in force.
# TYPE tandem_router_isl_threshold_tokens gauge
tandem_router_isl_threshold_tokens 960
tandem_router_isl_threshold_moves_total 2
tandem_router_gate_total{class="local"} 14
tandem_router_gate_total{class="disagg"} 3
tandem_router_routed_total{worker="decode-0"} 17
`
	got := routerLine(strings.NewReader(in))
	want := `isl_threshold_tokens=960 isl_threshold_moves_total=2 gate_total{class="local"}=14 gate_total{class="disagg"}=3`
	if got != want {
		t.Errorf("routerLine = %q, want %q", got, want)
	}
}
