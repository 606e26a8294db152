package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/tandem-serve/tandem/internal/testutil"
)

// The multi-host deployment's project and fixed addresses (compose/multihost.yaml).
const (
	mhProject = "tandem-mh-test"
	mhNet     = "172.29.81"
)

// mhHosts are the worker hosts and their fixed addresses.
var mhHosts = map[string]string{"host-1": mhNet + ".11", "host-2": mhNet + ".12", "host-3": mhNet + ".13"}

// A user brings up compose/multihost.yaml (three Consul servers, a client agent
// per host, ACLs, gossip encryption, TLS) and serves a steady load of streamed
// chats through the OpenAI SDK while the deployment loses a Consul server, a
// whole decode host, the network of a prefill host, and every Consul server in
// turn. The figures go to the test log (see docs/results/2026-12-07-multihost.md).
func TestMultihostFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("the multi-host test builds an image and starts 17 containers; skipped with -short")
	}
	c := newComposeRun(t, mhProject, "../compose/multihost.yaml")
	buildComposeImage(t)
	c.run(2*time.Minute, "down", "-v", "--remove-orphans")
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := c.output(time.Minute, "logs", "--no-color", "--tail", "40")
			t.Logf("compose logs:\n%s", out)
		}
		if out, err := c.output(3*time.Minute, "down", "-v", "--remove-orphans", "--timeout", "5"); err != nil {
			t.Errorf("down -v: %v\n%s", err, out)
		}
	})
	upStart := time.Now()
	c.run(8*time.Minute, "up", "-d")
	c.waitRunning(t, 4*time.Minute, "server-1", "server-2", "server-3", "gw", "host-1", "host-2", "host-3", "router", "frontend",
		"prefill-1", "prefill-2", "prefill-3", "decode-1", "decode-2", "decode-3")
	admin := c.adminConsul(t)
	waitPassing(t, admin, 2*time.Minute, 3, 3)
	t.Logf("up until every service was healthy and passing in Consul: %s", time.Since(upStart).Round(100*time.Millisecond))

	checkACLs(t, c, admin)

	load := startLoad("http://"+c.frontend, 4)
	stopped := false
	defer func() {
		if !stopped {
			load.Stop()
		}
	}()
	testutil.WaitForWithin(t, time.Minute, "the load is served", func() bool {
		time.Sleep(100 * time.Millisecond)
		ta := tallyOf(load.between(upStart, time.Now()))
		return ta.requests-ta.failed >= 20
	})
	begin := time.Now()

	t.Run("ConsulServerDown", func(t *testing.T) { consulServerDown(t, c, admin, load) })
	t.Run("DecodeHostKilled", func(t *testing.T) { decodeHostKilled(t, c, admin, load) })
	t.Run("PrefillHostPartitioned", func(t *testing.T) { prefillHostPartitioned(t, c, admin, load) })
	t.Run("RollingServerRestart", func(t *testing.T) { rollingServerRestart(t, c, admin, load) })

	all := load.Stop()
	stopped = true
	t.Logf("the whole run, %s: %s", time.Since(begin).Round(time.Second), tallyOf(all))

	// Leaked KV blocks: whatever a worker still holds once nothing runs.
	leaked := map[string]float64{}
	for host, ip := range mhHosts {
		for _, addr := range []string{ip + ":9000", ip + ":9100"} {
			var held float64
			ok := testutil.Eventually(30*time.Second, time.Second, func() bool {
				var found bool
				held, found = metricValue(addr, `tandem_kv_cache_blocks{state="active"}`)
				return found && held == 0
			})
			if !ok {
				leaked[host+" "+addr] = held
			}
		}
	}
	t.Logf("leaked KV blocks: %d workers holding active blocks after the load %v (goal: none)", len(leaked), leaked)
	if len(leaked) != 0 {
		t.Errorf("KV blocks still held 30s after the load: %v", leaked)
	}
}

// waitRunning waits until each named service has a running, healthy container.
func (c *composeRun) waitRunning(t *testing.T, limit time.Duration, services ...string) {
	t.Helper()
	var last map[string]string
	ok := testutil.Eventually(limit, time.Second, func() bool {
		last = map[string]string{}
		for _, ct := range c.containers() {
			last[ct.service()] = ct.health()
		}
		for _, s := range services {
			if last[s] != "running/healthy" {
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("after %s the services are %v; want %v running and healthy", limit, last, services)
	}
}

// container is the Docker name of service's container.
func (c *composeRun) container(t *testing.T, service string) string {
	t.Helper()
	for _, ct := range c.containers() {
		if ct.service() == service {
			return strings.TrimPrefix(ct.Name, "/")
		}
	}
	t.Fatalf("no container of service %s", service)
	return ""
}

func docker(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput(); err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// mhTokens is tandem-consul-init's record of the tokens it made.
type mhTokens struct {
	Management string
	Roles      map[string]struct{ Secret string }
}

// tokens reads the generated tokens out of the setup container's volume.
func (c *composeRun) tokens(t *testing.T) mhTokens {
	t.Helper()
	out, err := exec.Command("docker", "cp", c.container(t, "consul-secrets")+":/secrets/ca/tokens.json", "-").Output()
	if err != nil {
		t.Fatalf("docker cp tokens.json: %v", err)
	}
	tr := tar.NewReader(bytes.NewReader(out))
	if _, err := tr.Next(); err != nil {
		t.Fatalf("docker cp tokens.json: %v", err)
	}
	var tok mhTokens
	if err := json.NewDecoder(tr).Decode(&tok); err != nil {
		t.Fatalf("tokens.json: %v", err)
	}
	return tok
}

// consulAs is a client of gw's agent (published on loopback) with token.
func (c *composeRun) consulAs(t *testing.T, token string) *api.Client {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address = c.consulAddr
	cfg.Token = token
	client, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func (c *composeRun) adminConsul(t *testing.T) *api.Client {
	return c.consulAs(t, c.tokens(t).Management)
}

// mhPassing is the passing instances of service: id -> node.
func mhPassing(admin *api.Client, service string) map[string]string {
	entries, _, err := admin.Health().Service(service, "", true, nil)
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, e := range entries {
		out[e.Service.ID] = e.Node.Node
	}
	return out
}

func waitPassing(t *testing.T, admin *api.Client, limit time.Duration, prefill, decode int) {
	t.Helper()
	if !testutil.Eventually(limit, 500*time.Millisecond, func() bool {
		return len(mhPassing(admin, "tandem-prefill")) == prefill && len(mhPassing(admin, "tandem-decode")) == decode
	}) {
		t.Fatalf("after %s the passing workers are prefill %v, decode %v; want %d and %d", limit,
			mhPassing(admin, "tandem-prefill"), mhPassing(admin, "tandem-decode"), prefill, decode)
	}
}

// checkACLs: with default-deny, no token sees nothing and writes nothing, a
// worker's token cannot write the runtime policy, and every worker registered
// with its own host's agent at that host's address.
func checkACLs(t *testing.T, c *composeRun, admin *api.Client) {
	tok := c.tokens(t)
	anon := c.consulAs(t, "")
	if s, _, err := anon.Catalog().Services(nil); err != nil || len(s) != 0 {
		t.Errorf("without a token the catalog lists %v (err %v); want nothing (default deny)", s, err)
	}
	for role, client := range map[string]*api.Client{"no token": anon, "the prefill token": c.consulAs(t, tok.Roles["prefill"].Secret),
		"the decode token": c.consulAs(t, tok.Roles["decode"].Secret)} {
		if _, err := client.KV().Put(&api.KVPair{Key: "tandem/config/decode", Value: []byte(`{}`)}, nil); err == nil || !strings.Contains(err.Error(), "403") {
			t.Errorf("writing tandem/config/decode with %s: err %v, want 403 Permission denied", role, err)
		}
	}
	for _, svc := range []string{"tandem-prefill", "tandem-decode"} {
		entries, _, err := admin.Health().Service(svc, "", true, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if ip, ok := mhHosts[e.Node.Node]; !ok || e.Service.Address != ip || e.Node.Address != ip {
				t.Errorf("%s %s registered %s on node %s (%s); want its own host's agent and address", svc, e.Service.ID, e.Service.Address, e.Node.Node, e.Node.Address)
			}
		}
	}
	// ps on a host shows no token: the services read theirs from a file.
	out, err := exec.Command("docker", "inspect", "--format", "{{json .Config.Cmd}} {{json .Config.Env}}", c.container(t, "decode-1")).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range tok.Roles {
		if strings.Contains(string(out), r.Secret) {
			t.Errorf("decode-1's command line or environment holds a token: %s", out)
		}
	}
}

// operator runs tandem config with the operator's token through compose.
func (c *composeRun) operator(t *testing.T, args ...string) string {
	t.Helper()
	// docker-compose 1.29's run took over a minute on a crowded 2-core machine.
	out, err := c.output(3*time.Minute, append([]string{"run", "--rm", "-T", "operator", "config"}, args...)...)
	if err != nil {
		t.Fatalf("operator config %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// longPath streams one long prompt and returns its prefill path.
func (c *composeRun) longPath(t *testing.T) string {
	_, path, _ := c.streamChat(t, longPrompt(int(time.Now().UnixNano()%1000), 240), 4)
	return path
}

// mhReport appends a line to the file TANDEM_MULTIHOST_REPORT names, if any, so
// that a run's figures can go to docs/results as they are.
func mhReport(t *testing.T, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf(format, args...)
	t.Log(line)
	if p := os.Getenv("TANDEM_MULTIHOST_REPORT"); p != "" {
		f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			_, _ = io.WriteString(f, line+"\n")
			_ = f.Close()
		}
	}
}
