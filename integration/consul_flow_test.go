package integration

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/console"
	"github.com/tandem-serve/tandem/internal/testutil"
)

// The suite registers itself in a real Consul agent, finds its members there, and
// follows runtime policy from Consul KV, as a user deploying it with Consul sees.
func TestConsulDiscoveryAndPolicy(t *testing.T) {
	a := startConsul(t)
	consulFlags := []string{"--consul", a.Addr, "--check-interval", "500ms", "--check-timeout", "400ms"}
	with := func(args ...string) []string { return append(args, consulFlags...) }

	runService(t, with("prefill", "--listen", "127.0.0.1:0", "--id", "prefill-c")...)
	d1 := runService(t, with("decode", "--listen", "127.0.0.1:0", "--id", "decode-c1", "--short-prefill-threshold", "32")...)
	runService(t, with("router", "--listen", "127.0.0.1:0")...)
	fe := runService(t, with("frontend", "--listen", "127.0.0.1:0")...)

	// Registration is visible in the catalog, with passing checks and the metadata.
	for _, name := range []string{"tandem-prefill", "tandem-decode", "tandem-router", "tandem-frontend"} {
		testutil.WaitForWithin(t, 30*time.Second, name+" passing in Consul", func() bool { return len(passing(t, a, name)) == 1 })
	}
	d := passing(t, a, "tandem-decode")[0].Service
	if d.ID != "decode-c1" || d.Meta["mode"] != "decode" || d.Meta["engine"] != "native" || d.Meta["model"] != "tandem-tiny" ||
		d.Meta["block_size"] != "16" || d.Meta["kv_blocks"] == "" || d.Meta["version"] == "" {
		t.Errorf("tandem-decode registered as %s with meta %v", d.ID, d.Meta)
	}
	if p := passing(t, a, "tandem-prefill")[0].Service; p.Meta["mode"] != "prefill" || p.Meta["kv_transfer_port"] == "" {
		t.Errorf("tandem-prefill registered with meta %v, want its mode and KV transfer port", p.Meta)
	}
	// The router has no block size of its own: each request carries the model card's.
	if m := passing(t, a, "tandem-router")[0].Service.Meta; m["version"] == "" || m["block_size"] != "" {
		t.Errorf("tandem-router registered with meta %v, want its version and no block size", m)
	}
	// The frontend's model, and so its block size, come from the workers' cards.
	if m := passing(t, a, "tandem-frontend")[0].Service.Meta; m["version"] == "" {
		t.Errorf("tandem-frontend registered with meta %v, want its version", m)
	}
	waitHealthy(t, fe.addr)
	long := strings.Repeat("Disaggregation ships the KV cache between workers. ", 10)
	testutil.WaitForWithin(t, 30*time.Second, "a long prompt is prefilled remotely", func() bool {
		_, path := chat(t, fe.addr, long)
		return path == "remote"
	})

	// consul kv put of a threshold changes the decision for the next request.
	out, err := exec.Command(consulBinary(t), "kv", "put", "-http-addr="+a.Addr, "tandem/config/decode", `{"short_prefill_threshold": 100000}`).CombinedOutput()
	if err != nil {
		t.Fatalf("consul kv put: %v %s", err, out)
	}
	// Each check below uses a prompt the decode worker has never seen: a repeated
	// one would be cached there from its remote prefill and go local whatever the
	// threshold says.
	fresh := 0
	freshLong := func() string { fresh++; return fmt.Sprintf("Fresh prompt %d. %s", fresh, long) }
	testutil.WaitForWithin(t, 10*time.Second, "the raised threshold makes a long prompt local", func() bool {
		_, path := chat(t, fe.addr, freshLong())
		return path == "local"
	})
	// Malformed config is refused; the last good one stays.
	for _, bad := range []string{`{"short_prefill_threshhold": 1}`, `{"policy": "sometimes"}`, `not json`} {
		if out, err := exec.Command(consulBinary(t), "kv", "put", "-http-addr="+a.Addr, "tandem/config/decode", bad).CombinedOutput(); err != nil {
			t.Fatalf("consul kv put: %v %s", err, out)
		}
	}
	time.Sleep(time.Second) // let the watches see the bad values
	for range 3 {
		if _, path := chat(t, fe.addr, freshLong()); path != "local" {
			t.Errorf("after malformed config a long prompt went %s; the last good config (threshold 100000: local) should stay", path)
		}
	}
	if !metricAtLeast(t, d1.addr, `tandem_config_rejected_total{key="tandem/config/decode"}`, 3) {
		t.Errorf("the rejected configs were not counted")
	}
	// tandem config set validates before writing.
	if out, err := exec.Command(tandemBin, "config", "--consul", a.Addr, "set", "decode", `{"short_prefill_threshold": -4}`).CombinedOutput(); err == nil {
		t.Errorf("tandem config set accepted a negative threshold: %s", out)
	}
	if out, err := exec.Command(tandemBin, "config", "--consul", a.Addr, "set", "decode", `{"short_prefill_threshold": 32}`).CombinedOutput(); err != nil {
		t.Fatalf("tandem config set: %v %s", err, out)
	}
	// The console's policy form writes through the same check, and its events show
	// the router applying what it wrote.
	status, events := consoleEvents(t, http.DefaultClient, "http://"+fe.addr, "")
	if status != http.StatusOK {
		t.Fatalf("console events: %d", status)
	}
	if h := nextEvent[console.Hello](t, events, "hello", 10*time.Second, "the greeting", nil); !h.PolicyWritable {
		t.Errorf("with Consul the console's policy is read-only: %+v", h)
	}
	if code, body := postPolicy(t, fe.addr, `{"target":"decode","value":{"short_prefill_threshhold":1}}`); code != http.StatusBadRequest ||
		!strings.Contains(body, "short_prefill_threshhold") {
		t.Errorf("the console's form took a misspelt field: %d %s", code, body)
	}
	if code, body := postPolicy(t, fe.addr, `{"target":"router","value":{"queue_weight":3}}`); code != http.StatusOK {
		t.Fatalf("the console's form: %d %s", code, body)
	}
	nextEvent(t, events, "fleet", 15*time.Second, "the router's new queue weight", func(f console.Fleet) bool {
		return f.Router != nil && f.Router.QueueWeight == 3
	})

	// (A fresh prompt: the earlier one is now cached on the decode worker, so its
	// effective length is short.)
	attempt := 0
	testutil.WaitForWithin(t, 10*time.Second, "the lowered threshold makes a long prompt remote again", func() bool {
		attempt++
		_, path := chat(t, fe.addr, fmt.Sprintf("Attempt %d. %s", attempt, strings.Repeat("A prompt the decode worker has never seen. ", 10)))
		return path == "remote"
	})

	// A new worker receives traffic.
	d2 := runService(t, with("decode", "--listen", "127.0.0.1:0", "--id", "decode-c2")...)
	seen := map[string]bool{}
	testutil.WaitForWithin(t, 30*time.Second, "both decode workers get requests", func() bool {
		w, _ := chat(t, fe.addr, "hello")
		seen[w] = true
		return seen["decode-c1"] && seen["decode-c2"]
	})

	// A drained (NOT_SERVING) worker is removed from routing.
	if out, err := exec.Command(tandemBin, "drain", d2.addr).CombinedOutput(); err != nil {
		t.Fatalf("tandem drain: %v %s", err, out)
	}
	testutil.WaitForWithin(t, 15*time.Second, "the drained worker leaves Consul's passing set", func() bool { return len(passing(t, a, "tandem-decode")) == 1 })
	onlyFirst(t, fe.addr, 20*time.Second, "after draining decode-c2")
	if out, err := exec.Command(tandemBin, "drain", d2.addr, "--undo").CombinedOutput(); err != nil {
		t.Fatalf("tandem drain --undo: %v %s", err, out)
	}
	testutil.WaitForWithin(t, 15*time.Second, "the undrained worker is passing again", func() bool { return len(passing(t, a, "tandem-decode")) == 2 })

	// A stopped worker is removed from routing. It deregisters itself as its drain
	// begins: by the time the process has exited it is gone from the catalog, not
	// merely failing its check (which would leave it listed as critical).
	d2.stop(t)
	all, _, err := a.API.Health().Service("tandem-decode", "", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all {
		if strings.Contains(e.Service.ID, "decode-c2") {
			t.Errorf("decode-c2 exited after SIGTERM but is still in Consul's catalog (checks %v)", e.Checks.AggregatedStatus())
		}
	}
	testutil.WaitForWithin(t, 15*time.Second, "the stopped worker leaves Consul", func() bool { return len(passing(t, a, "tandem-decode")) == 1 })
	onlyFirst(t, fe.addr, 20*time.Second, "after stopping decode-c2")

	// With Consul stopped, requests are still served from the last membership;
	// when it returns (a dev agent forgets everything), the services register again.
	a.stop()
	for range 5 {
		if w, _ := chat(t, fe.addr, "still there?"); w != "decode-c1" {
			t.Fatalf("with Consul down, served by %q", w)
		}
	}
	a.start()
	for _, name := range []string{"tandem-prefill", "tandem-decode", "tandem-router", "tandem-frontend"} {
		testutil.WaitForWithin(t, 30*time.Second, name+" registered again after the restart", func() bool { return len(passing(t, a, name)) == 1 })
	}
	if w, _ := chat(t, fe.addr, "after the restart"); w != "decode-c1" {
		t.Fatalf("after Consul restarted, served by %q", w)
	}
}

// onlyFirst waits until requests stop reaching anything but decode-c1, then checks
// that ten in a row do.
func onlyFirst(t *testing.T, fe string, limit time.Duration, when string) {
	t.Helper()
	testutil.WaitForWithin(t, limit, "routing settles "+when, func() bool {
		for range 10 {
			if w, _ := chat(t, fe, "who serves this?"); w != "decode-c1" {
				return false
			}
		}
		return true
	})
}

// metricAtLeast scrapes addr's /metrics for a sample at least min.
func metricAtLeast(t *testing.T, addr, sample string, min float64) bool {
	t.Helper()
	out, err := exec.Command("curl", "-s", "http://"+addr+"/metrics").Output()
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			var f float64
			if _, err := fmtSscan(v, &f); err == nil {
				return f >= min
			}
		}
	}
	return false
}

// postPolicy posts to the console's policy endpoint of the frontend at addr.
func postPolicy(t *testing.T, addr, body string) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/console/policy", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
