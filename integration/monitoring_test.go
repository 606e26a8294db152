package integration

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/internal/testutil/fakeengine"
)

// monitoringDir holds the Grafana dashboard and Prometheus alert rules.
const monitoringDir = "../deploy/monitoring/"

var metricName = regexp.MustCompile(`\btandem_[a-z0-9_]+`)

// monitoringExprs is every PromQL expression of the alert rules and the dashboard.
func monitoringExprs(t *testing.T) []string {
	t.Helper()
	rules, err := os.ReadFile(monitoringDir + "alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for line := range strings.Lines(string(rules)) {
		if e, ok := strings.CutPrefix(strings.TrimSpace(line), "expr:"); ok {
			exprs = append(exprs, strings.TrimSpace(e))
		}
	}
	for _, p := range dashboardPanels(t) {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	return exprs
}

// exposed is the names of the samples on addr's /metrics.
func exposed(t *testing.T, addr string, into map[string]bool) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		into[line[:strings.IndexAny(line, "{ ")]] = true
	}
}

// Every tandem_ metric the dashboard and the alert rules query is one that a
// running tandem up exposes, once it has served a remote and a local prefill: a
// renamed metric breaks this test, not an operator's dashboard.
func TestMonitoringNamesExposedMetrics(t *testing.T) {
	exprs := monitoringExprs(t)
	if len(exprs) < 10 {
		t.Fatalf("found %d expressions in %s, want the dashboard's and the rules'", len(exprs), monitoringDir)
	}
	p, url := startUpWith(t, []string{fixtureModel, "TANDEM_LOG_LEVEL=info"}, "--short-prefill-threshold", "32")
	if path := postTraced(t, url, "", longPrompt(2, 300)).Get("x-tandem-prefill-path"); path != "remote" {
		t.Fatalf("prefill path %q, want remote", path)
	}
	postTraced(t, url, "", "hi")

	var ready struct {
		Frontend, Router string
		Decode           []string `json:"decode_workers"`
		Prefill          []string `json:"prefill_workers"`
	}
	for line := range strings.Lines(p.logs()) {
		if strings.Contains(line, `"msg":"services ready"`) {
			if err := json.Unmarshal([]byte(line), &ready); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The GPU group's metrics come from a worker in front of an engine server
	// that publishes KV events.
	gpu := eventsWorker(t, "agg-monitored", fakeengine.NewPublisher(t, "kv-events", fakeengine.MapEncoding), true)
	waitHealthy(t, gpu)
	names := map[string]bool{}
	for _, a := range append(append([]string{ready.Frontend, ready.Router, gpu}, ready.Decode...), ready.Prefill...) {
		exposed(t, a, names)
	}
	if len(names) < 20 || len(ready.Decode) == 0 || len(ready.Prefill) == 0 {
		t.Fatalf("scraped %d metric names from %+v", len(names), ready)
	}
	for _, e := range exprs {
		found := metricName.FindAllString(e, -1)
		if len(found) == 0 && !strings.HasPrefix(e, "up{") { // up is Prometheus's own
			t.Errorf("%q names no tandem_ metric", e)
		}
		for _, m := range found {
			if !names[m] {
				t.Errorf("%q queries %s, which tandem up does not expose", e, m)
			}
		}
	}
}

// dashboardPanel is a panel of deploy/monitoring/dashboard.json: its title and the
// PromQL of its queries.
type dashboardPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// dashboardPanels reads the dashboard's panels.
func dashboardPanels(t *testing.T) []dashboardPanel {
	t.Helper()
	b, err := os.ReadFile(monitoringDir + "dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []dashboardPanel `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	return dash.Panels
}
