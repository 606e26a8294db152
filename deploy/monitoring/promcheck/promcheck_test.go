// Package promcheck parses the repository's Prometheus alert rules and Grafana
// dashboard with Prometheus's own parsers. It is a module of its own so that
// Prometheus's dependencies never reach tandem's binary or its go.mod.
package promcheck

import (
	"encoding/json"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// tandemName is how integration/monitoring_test.go finds the metric names it
// checks against a running tandem; this test holds it to what the parser finds.
var tandemName = regexp.MustCompile(`\btandem_[a-z0-9_]+`)

// builtin are series Prometheus makes itself, which no tandem process exposes.
var builtin = []string{"up"}

func TestAlertRulesParse(t *testing.T) {
	groups, errs := rulefmt.ParseFile("../alerts.yaml", false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Error(err)
	}
	if groups == nil {
		t.Fatal("alerts.yaml: no rule groups")
	}
	n := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			n++
			if r.Alert == "" {
				t.Errorf("group %s: a rule with no alert name (recording rules belong elsewhere)", g.Name)
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("alert %s has no summary annotation", r.Alert)
			}
			checkExpr(t, "alert "+r.Alert, r.Expr)
		}
	}
	if n < 8 {
		t.Errorf("alerts.yaml holds %d rules, want at least 8", n)
	}
}

func TestDashboardQueriesParse(t *testing.T) {
	b, err := os.ReadFile("../dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	n := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			n++
			checkExpr(t, "panel "+p.Title, tg.Expr)
		}
	}
	if n < 10 {
		t.Errorf("dashboard.json holds %d queries, want at least 10", n)
	}
}

// checkExpr parses expr and checks that the metric names the parser finds are
// the ones the regular expression of the scrape test finds, plus builtins.
func checkExpr(t *testing.T, where, expr string) {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %q does not parse: %v", where, expr, err)
		return
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			names = append(names, vs.Name)
		}
		return nil
	})
	var want []string
	for _, n := range names {
		if !slices.Contains(builtin, n) {
			want = append(want, n)
		}
	}
	got := tandemName.FindAllString(expr, -1)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(slices.Compact(got), slices.Compact(want)) {
		t.Errorf("%s: the parser finds metrics %v in %q, the scrape test's pattern %v", where, want, expr, got)
	}
	if len(names) == 0 {
		t.Errorf("%s: %q selects no series", where, expr)
	}
}
