package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/internal/testutil"
)

// monitoringProject is the compose project the monitoring test runs as.
const monitoringProject = "tandem-monitoring"

// A user deploys compose.yaml with its monitoring profile: Prometheus finds every
// tandem process in Consul, the two decode replicas among them, scrapes each, has
// loaded every rule of deploy/monitoring/alerts.yaml, and after a few requests
// answers the dashboard's queries with data. A decode worker that dies (SIGKILL,
// so it leaves its Consul registration behind, as a crash does) is a target down,
// and TandemTargetDown goes pending and then fires (its for: is 2m), naming that
// worker, before Consul forgets the registration (compose.yaml's
// --deregister-after, 5m) and with it the target.
func TestComposeMonitoring(t *testing.T) {
	if testing.Short() {
		t.Skip("the compose monitoring test builds images and starts containers; skipped with -short")
	}
	c := newComposeRun(t, monitoringProject, "../compose/compose.yaml")
	promPort := freePort(t)
	c.env = append(c.env, fmt.Sprintf("TANDEM_PROMETHEUS_PORT=%d", promPort))
	prom := &promAPI{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", promPort)}
	buildMonitoringImages(t)

	profile := []string{"--profile", "monitoring"}
	c.run(time.Minute, append(profile, "down", "-v", "--remove-orphans")...) // leftovers of a killed run
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := c.output(time.Minute, "logs", "--no-color", "--tail", "40")
			t.Logf("compose logs:\n%s", out)
		}
		if out, err := c.output(2*time.Minute, append(profile, "down", "-v", "--remove-orphans", "--timeout", "20")...); err != nil {
			t.Errorf("down -v: %v\n%s", err, out)
		}
	})

	start := time.Now()
	c.run(5*time.Minute, append(profile, "up", "-d", "--scale", "decode=2")...)
	c.waitHealthy(map[string]int{"consul": 1, "router": 1, "frontend": 1, "prefill": 1, "decode": 2, "prometheus": 1}, 3*time.Minute)
	t.Logf("up with the monitoring profile until every service was healthy took %s", since(start))

	// Every tandem process registered in Consul is a target, and up.
	want := map[string]string{} // Consul service id (the target's instance) -> its service (the job)
	for _, svc := range []string{"tandem-frontend", "tandem-router", "tandem-prefill", "tandem-decode"} {
		testutil.WaitForWithin(t, time.Minute, svc+" is passing in Consul", func() bool {
			entries, _, err := c.consul.Health().Service(svc, "", true, nil)
			if err != nil || len(entries) == 0 || svc == "tandem-decode" && len(entries) != 2 {
				return false
			}
			for _, e := range entries {
				want[e.Service.ID] = svc
			}
			return true
		})
	}
	start = time.Now()
	var last string
	if !poll(2*time.Minute, func() bool {
		got := map[string]string{}
		up := prom.query(`up{job=~"tandem.*"}`)
		for _, s := range up {
			if s.value() == "1" {
				got[s.Metric["instance"]] = s.Metric["job"]
			}
		}
		last = fmt.Sprint(up)
		return fmt.Sprint(got) == fmt.Sprint(want) // fmt sorts map keys
	}) {
		t.Fatalf("Prometheus's tandem targets are %s (last API error: %s); want these up, by instance: %v", last, prom.lastErr, want)
	}
	t.Logf("every tandem process (%d) was an up target %s after all were healthy", len(want), since(start))

	// Every alert rule of deploy/monitoring/alerts.yaml is loaded and evaluates.
	shipped := alertNames(t)
	var rules []promRule
	if !poll(time.Minute, func() bool {
		rules = prom.rules()
		for _, name := range shipped {
			i := slices.IndexFunc(rules, func(r promRule) bool { return r.Name == name })
			if i < 0 || rules[i].Health != "ok" {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("Prometheus's rules are %+v (last API error: %s); want every alert of alerts.yaml %v loaded with health ok", rules, prom.lastErr, shipped)
	}

	// Requests, one of them prefilled remotely, then the dashboard's own
	// expressions answer with data about them.
	c.streamChat(t, "Tell me about monitoring.", 8)
	long := strings.Repeat("The prefill container ships the KV cache to the decode container. ", 20)
	testutil.WaitForWithin(t, time.Minute, "a long prompt is prefilled remotely", func() bool {
		_, path, _ := c.streamChat(t, long, 4)
		return path == "remote"
	})
	sent := 0
	for _, q := range []struct{ panel, label, value string }{
		{"Requests by status", "code", "200"},
		{"Prefill decisions by path and reason", "path", "remote"},
	} {
		expr := dashboardExpr(t, q.panel)
		start = time.Now()
		var res []promSample
		// rate() needs a counter's increase between two scrapes (10s apart), so
		// requests go on while the query is polled.
		if !poll(time.Minute, func() bool {
			// A new first sentence each time: a prompt the decode worker has cached
			// is short in uncached tokens, and prefilled locally.
			sent++
			c.streamChat(t, fmt.Sprintf("Request %d. %s", sent, long), 4)
			res = prom.query(expr)
			return slices.ContainsFunc(res, func(s promSample) bool { return s.Metric[q.label] == q.value && s.value() != "0" })
		}) {
			t.Errorf("the dashboard's %q query %s answers %v (last API error: %s); want a series with %s=%q above zero", q.panel, expr, res, prom.lastErr, q.label, q.value)
			continue
		}
		t.Logf("the dashboard's %q query had data %s after the requests", q.panel, since(start))
	}

	// A decode worker dies.
	var victim composeContainer
	for _, ct := range c.containers() {
		if ct.service() == "decode" {
			victim = ct
			break
		}
	}
	victimID := consulIDAt(t, c, victim.ip())
	targetDown := ruleOf(t, rules, "TandemTargetDown")
	if out, err := exec.Command("docker", "kill", victim.Name).CombinedOutput(); err != nil {
		t.Fatalf("docker kill %s: %v %s", victim.Name, err, out)
	}
	killed := time.Now()
	var alerts []promAlert
	for _, state := range []string{"pending", "firing"} {
		limit := time.Minute
		if state == "firing" {
			limit = time.Duration(targetDown.Duration)*time.Second + time.Minute
		}
		if !poll(limit, func() bool {
			alerts = prom.alerts()
			return slices.ContainsFunc(alerts, func(a promAlert) bool {
				return a.Labels["alertname"] == "TandemTargetDown" && a.Labels["instance"] == victimID && a.State == state
			})
		}) {
			t.Fatalf("%s after killing decode worker %s (container %s), the alerts are %+v (last API error: %s); want TandemTargetDown %s for it (the rule's for: %gs)",
				since(killed), victimID, victim.Name, alerts, prom.lastErr, state, targetDown.Duration)
		}
		t.Logf("TandemTargetDown was %s for the killed worker %s after the kill", state, since(killed))
	}
	for _, ct := range c.containers() {
		if ct.Name == victim.Name && ct.State.Status == "running" {
			t.Errorf("the killed container %s is running again: Docker restarted it, so the alert was not about a dead worker", ct.Name)
		}
	}
}

// consulIDAt is the Consul service id of the tandem-decode registration at ip.
func consulIDAt(t *testing.T, c *composeRun, ip string) string {
	t.Helper()
	entries, _, err := c.consul.Health().Service("tandem-decode", "", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Service.Address == ip {
			return e.Service.ID
		}
	}
	t.Fatalf("no tandem-decode registration at %s in Consul", ip)
	return ""
}

// buildMonitoringImages runs compose/build.sh --monitoring once per test binary:
// tandem:local and tandem-prometheus:local.
func buildMonitoringImages(t *testing.T) {
	t.Helper()
	monitoringOnce.Do(func() {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "../compose/build.sh", "--monitoring").CombinedOutput(); err != nil {
			monitoringErr = fmt.Errorf("compose/build.sh --monitoring: %v\n%s", err, out)
		}
		t.Logf("compose/build.sh --monitoring took %s", since(start))
	})
	if monitoringErr != nil {
		t.Fatal(monitoringErr)
	}
}

var (
	monitoringOnce sync.Once
	monitoringErr  error
)

// alertNames is the name of every alert rule of deploy/monitoring/alerts.yaml.
func alertNames(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(monitoringDir + "alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for line := range strings.Lines(string(b)) {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "- alert:"); ok {
			names = append(names, strings.TrimSpace(name))
		}
	}
	if len(names) < 5 {
		t.Fatalf("found %d alerts in alerts.yaml: %v", len(names), names)
	}
	return names
}

// dashboardExpr is the first query of the dashboard's panel titled title.
func dashboardExpr(t *testing.T, title string) string {
	t.Helper()
	for _, p := range dashboardPanels(t) {
		if p.Title == title && len(p.Targets) > 0 {
			return p.Targets[0].Expr
		}
	}
	t.Fatalf("dashboard.json has no panel %q with a query", title)
	return ""
}

func ruleOf(t *testing.T, rules []promRule, name string) promRule {
	t.Helper()
	for _, r := range rules {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no rule %s among %+v", name, rules)
	return promRule{}
}

// poll calls ok every second until it holds or limit has passed.
func poll(limit time.Duration, ok func() bool) bool {
	deadline := time.Now().Add(limit)
	for {
		if ok() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Second)
	}
}

// promAPI reads Prometheus's HTTP API; a request that fails reads as no data
// (the callers poll), and its error is kept for their failure messages.
type promAPI struct {
	t       *testing.T
	base    string
	lastErr string
}

type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"` // [unix time, "value"]
}

func (s promSample) value() string {
	if len(s.Value) == 2 {
		if v, ok := s.Value[1].(string); ok {
			return v
		}
	}
	return ""
}

type promRule struct {
	Name     string  `json:"name"`
	Type     string  `json:"type"`
	Health   string  `json:"health"`
	State    string  `json:"state"`
	Duration float64 `json:"duration"` // the alert's for:, in seconds
}

type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

func (p *promAPI) get(path string, data any) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.base+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.lastErr = fmt.Sprintf("%s: %v", path, err)
		return
	}
	defer resp.Body.Close()
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil || env.Status != "success" {
		p.lastErr = fmt.Sprintf("%s: HTTP %d, status %q, error %q, %v", path, resp.StatusCode, env.Status, env.Error, err)
		return
	}
	if err := json.Unmarshal(env.Data, data); err != nil {
		p.t.Fatalf("prometheus %s: %v", path, err)
	}
}

func (p *promAPI) query(expr string) []promSample {
	var d struct {
		Result []promSample `json:"result"`
	}
	p.get("/api/v1/query?query="+url.QueryEscape(expr), &d)
	return d.Result
}

func (p *promAPI) rules() []promRule {
	var d struct {
		Groups []struct {
			Rules []promRule `json:"rules"`
		} `json:"groups"`
	}
	p.get("/api/v1/rules", &d)
	var out []promRule
	for _, g := range d.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

func (p *promAPI) alerts() []promAlert {
	var d struct {
		Alerts []promAlert `json:"alerts"`
	}
	p.get("/api/v1/alerts", &d)
	return d.Alerts
}
