// The multi-host deployment's faults, one subtest each, under the load that
// TestMultihostFaults keeps running throughout.

package integration

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/tandem-serve/tandem/internal/testutil"
)

// mhServers maps the Consul servers' fixed addresses to their services.
var mhServers = map[string]string{mhNet + ".5": "server-1", mhNet + ".6": "server-2", mhNet + ".7": "server-3"}

// on returns the id of the passing instance of service on node.
func on(t *testing.T, admin *api.Client, service, node string) string {
	t.Helper()
	for id, n := range mhPassing(admin, service) {
		if n == node {
			return id
		}
	}
	t.Fatalf("no passing %s on %s: %v", service, node, mhPassing(admin, service))
	return ""
}

// raftHealthy: three voters and a leader.
func raftHealthy(admin *api.Client) bool {
	cfg, err := admin.Operator().RaftGetConfiguration(nil)
	if err != nil || len(cfg.Servers) != 3 {
		return false
	}
	leaders := 0
	for _, s := range cfg.Servers {
		if !s.Voter {
			return false
		}
		if s.Leader {
			leaders++
		}
	}
	return leaders == 1
}

func since(t0 time.Time) time.Duration { return time.Since(t0).Round(100 * time.Millisecond) }

// The leader of the Consul servers stops: requests go on, a worker that restarts
// registers again, and a runtime policy written with tandem config applies.
func consulServerDown(t *testing.T, c *composeRun, admin *api.Client, load *mhLoad) {
	leader, err := admin.Status().Leader()
	if err != nil {
		t.Fatal(err)
	}
	server := mhServers[strings.Split(leader, ":")[0]]
	if server == "" {
		t.Fatalf("leader %q is none of the servers %v", leader, mhServers)
	}
	t0 := time.Now()
	docker(t, "stop", "-t", "10", c.container(t, server))
	mhReport(t, "consul server down: stopped the leader %s in %s", server, since(t0))

	before := mhPassing(admin, "tandem-prefill")
	restart := time.Now()
	docker(t, "restart", "-t", "20", c.container(t, "prefill-1"))
	if !testutil.Eventually(time.Minute, 200*time.Millisecond, func() bool {
		now := mhPassing(admin, "tandem-prefill")
		for id := range now {
			if _, old := before[id]; !old && now[id] == "host-1" {
				return len(now) == 3
			}
		}
		return false
	}) {
		t.Fatalf("prefill-1 restarted with a server down did not register again in 1m: %v", mhPassing(admin, "tandem-prefill"))
	}
	mhReport(t, "consul server down: a restarted prefill worker registered and passed again %s after its restart", since(restart))

	c.operator(t, "set", "decode", `{"short_prefill_threshold": 100000}`)
	set := time.Now()
	if !testutil.Eventually(30*time.Second, 500*time.Millisecond, func() bool { return c.longPath(t) == "local" }) {
		t.Fatal("a long prompt is still prefilled remotely 30s after short_prefill_threshold 100000 was written with a server down")
	}
	mhReport(t, "consul server down: short_prefill_threshold 100000 written by tandem config applied in %s (a long prompt went local; timed from the write's return)", since(set))
	c.operator(t, "set", "decode", `{"short_prefill_threshold": 128}`)
	if !testutil.Eventually(30*time.Second, 500*time.Millisecond, func() bool { return c.longPath(t) == "remote" }) {
		t.Fatal("a long prompt is not prefilled remotely 30s after short_prefill_threshold went back to 128")
	}
	t1 := time.Now()
	ta := tallyOf(load.touching(t0, t1))
	mhReport(t, "consul server down: load over %s with the server down: %s", t1.Sub(t0).Round(time.Second), ta)
	if ta.failed != 0 {
		t.Errorf("requests failed with one Consul server down: %s", ta)
	}

	docker(t, "start", c.container(t, server))
	c.waitRunning(t, 2*time.Minute, server)
	if !testutil.Eventually(time.Minute, 500*time.Millisecond, func() bool { return raftHealthy(admin) }) {
		t.Fatalf("%s back, but the servers are not three voters with a leader", server)
	}
}

// A whole host with a decode worker (its agent, prefill and decode worker) dies
// while it streams, network first: its requests end, none hangs, and new
// requests stop going there.
func decodeHostKilled(t *testing.T, c *composeRun, admin *api.Client, load *mhLoad) {
	victim := on(t, admin, "tandem-decode", "host-3")
	names := []string{c.container(t, "host-3"), c.container(t, "prefill-3"), c.container(t, "decode-3")}
	// A dead machine does not come back by itself.
	docker(t, append([]string{"update", "--restart", "no"}, names...)...)
	// Kill it while long answers stream from it, so that some are cut mid-way.
	if !testutil.Eventually(30*time.Second, 10*time.Millisecond, func() bool { return load.inflightLongOn(victim) >= 1 }) {
		testutil.WaitForWithin(t, 30*time.Second, "a request streams from "+victim, func() bool {
			time.Sleep(10 * time.Millisecond)
			return load.inflightOn(victim) > 0
		})
	}
	inflight := load.inflightOn(victim)
	t0 := time.Now()
	// The network goes first, as when a machine loses power: no process on it
	// gets to send a RST or FIN, so its peers hear silence.
	network := mhProject + "_default"
	docker(t, "network", "disconnect", network, names[0])
	docker(t, append([]string{"kill"}, names...)...)
	var gone time.Duration
	if testutil.Eventually(time.Minute, 100*time.Millisecond, func() bool { _, ok := mhPassing(admin, "tandem-decode")[victim]; return !ok }) {
		gone = time.Since(t0)
	} else {
		t.Errorf("%s still passes in Consul a minute after its host was killed", victim)
	}
	if !testutil.Eventually(mhHangLimit+15*time.Second, 200*time.Millisecond, func() bool { return load.unfinished(t0) == 0 }) {
		t.Errorf("%d requests started before the kill have not ended %s later", load.unfinished(t0), since(t0))
	}
	for time.Since(t0) < 40*time.Second {
		time.Sleep(time.Second)
	}
	window := load.touching(t0, time.Now())
	var onVictim []mhRequest
	var last time.Time // the latest start routed to the dead host, or failing
	for _, r := range window {
		if r.start.Before(t0) && r.worker == victim {
			onVictim = append(onVictim, r)
		}
		if r.start.After(t0) && (r.worker == victim || r.failed()) && r.start.After(last) {
			last = r.start
		}
		if strings.HasPrefix(r.kind, "hung") {
			t.Errorf("a request hung: started %s after the kill, %s", r.start.Sub(t0).Round(time.Millisecond), r.kind)
		}
	}
	var lastEnd time.Duration // when the last of those streams ended
	for _, r := range onVictim {
		lastEnd = max(lastEnd, r.end.Sub(t0))
	}
	recovery := time.Duration(0)
	if !last.IsZero() {
		recovery = last.Sub(t0)
	}
	mhReport(t, "decode host killed: %d requests streaming from %s at the kill (%d seen ending, the last %s after the kill): %s",
		inflight, victim, len(onVictim), lastEnd.Round(100*time.Millisecond), tallyOf(onVictim))
	mhReport(t, "decode host killed: Consul stopped listing %s after %s; the last request sent to it or failing started %s after the kill",
		victim, gone.Round(100*time.Millisecond), recovery.Round(100*time.Millisecond))
	mhReport(t, "decode host killed: load over the 40s from the kill: %s", tallyOf(window))
	if recovery > 30*time.Second {
		t.Errorf("requests still went to the dead host or failed %s after the kill", recovery)
	}

	docker(t, append([]string{"update", "--restart", "unless-stopped"}, names...)...)
	docker(t, "network", "connect", "--ip", mhHosts["host-3"], "--alias", "host-3", network, names[0])
	docker(t, "start", names[0])
	c.waitRunning(t, time.Minute, "host-3")
	docker(t, "start", names[1], names[2])
	c.waitRunning(t, 2*time.Minute, "prefill-3", "decode-3")
	waitPassing(t, admin, 2*time.Minute, 3, 3)
}

// The network of a host with a prefill worker is cut: long prompts go to the
// other prefill hosts (or fall back to local prefill), and once it is healed the
// host takes work again.
func prefillHostPartitioned(t *testing.T, c *composeRun, admin *api.Client, load *mhLoad) {
	victim := on(t, admin, "tandem-prefill", "host-2")
	metrics := mhHosts["host-2"] + ":9000"
	okBefore, _ := metricValue(metrics, `tandem_prefill_requests_total{outcome="ok"}`)
	host, network := c.container(t, "host-2"), mhProject+"_default"
	t0 := time.Now()
	docker(t, "network", "disconnect", network, host)
	var gone time.Duration
	if testutil.Eventually(time.Minute, 100*time.Millisecond, func() bool { _, ok := mhPassing(admin, "tandem-prefill")[victim]; return !ok }) {
		gone = time.Since(t0)
	} else {
		t.Errorf("%s still passes in Consul a minute after its host was cut off", victim)
	}
	settle := time.Now().Add(2 * time.Second)
	for time.Since(t0) < 30*time.Second {
		time.Sleep(time.Second)
	}
	cut := time.Now()
	paths := map[string]int{}
	var longFailed []mhRequest
	for _, r := range load.between(settle, cut) {
		if r.long {
			paths[r.path]++
			if r.failed() {
				longFailed = append(longFailed, r)
			}
		}
	}
	mhReport(t, "prefill host partitioned: Consul stopped listing %s after %s; long prompts started after that by prefill path: %v, failed %d",
		victim, gone.Round(100*time.Millisecond), paths, len(longFailed))
	mhReport(t, "prefill host partitioned: load over the 30s of the partition: %s", tallyOf(load.touching(t0, cut)))
	if len(longFailed) != 0 || paths["remote"]+paths["fallback"] == 0 {
		t.Errorf("with host-2 cut off, long prompts went %v and %d failed (%s); want them served remotely elsewhere or by fallback",
			paths, len(longFailed), tallyOf(longFailed))
	}

	heal := time.Now()
	docker(t, "network", "connect", "--ip", mhHosts["host-2"], "--alias", "host-2", network, host)
	var back, working time.Duration
	if testutil.Eventually(2*time.Minute, 200*time.Millisecond, func() bool { _, ok := mhPassing(admin, "tandem-prefill")[victim]; return ok }) {
		back = time.Since(heal)
	} else {
		t.Fatalf("%s does not pass in Consul 2m after its host's network came back", victim)
	}
	if testutil.Eventually(time.Minute, 500*time.Millisecond, func() bool {
		v, ok := metricValue(metrics, `tandem_prefill_requests_total{outcome="ok"}`)
		return ok && v > okBefore
	}) {
		working = time.Since(heal)
	} else {
		t.Errorf("%s prefilled nothing in the minute after it passed again", victim)
	}
	mhReport(t, "prefill host partitioned: healed; %s passed again after %s and prefilled again after %s", victim,
		back.Round(100*time.Millisecond), working.Round(100*time.Millisecond))
	waitPassing(t, admin, 2*time.Minute, 3, 3)
}

// Each Consul server restarts in turn, the next once the quorum is whole again:
// the load goes on untouched.
func rollingServerRestart(t *testing.T, c *composeRun, admin *api.Client, load *mhLoad) {
	t0 := time.Now()
	for _, s := range slices.Sorted(func(yield func(string) bool) {
		for _, name := range mhServers {
			if !yield(name) {
				return
			}
		}
	}) {
		one := time.Now()
		docker(t, "restart", "-t", "10", c.container(t, s))
		c.waitRunning(t, 2*time.Minute, s)
		if !testutil.Eventually(2*time.Minute, 500*time.Millisecond, func() bool { return raftHealthy(admin) }) {
			t.Fatalf("after restarting %s the servers are not three voters with a leader", s)
		}
		mhReport(t, "rolling restart: %s restarted and the quorum whole again in %s", s, since(one))
	}
	ta := tallyOf(load.touching(t0, time.Now()))
	mhReport(t, "rolling restart: load over %s: %s", since(t0), ta)
	if ta.failed != 0 {
		t.Errorf("requests failed during the rolling restart of the Consul servers: %s", ta)
	}
	waitPassing(t, admin, time.Minute, 3, 3)
}
