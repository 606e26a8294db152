package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"

	"github.com/tandem-serve/tandem/internal/testutil"
	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
)

// fixtureModel is the workers' model unless a test names one (a flag wins over the
// environment): the random-weight tiny, whose cl100k token counts and KV sizes
// (a full 1 MiB chunk from a few hundred tokens) the suite's thresholds and faults
// are written against. TestDefaultModel* serve the default, stories260K.
const fixtureModel = "TANDEM_MODEL=tiny"

// startService runs one tandem service as its own process and returns the address
// it logged as listening on.
func startService(t *testing.T, args ...string) string {
	t.Helper()
	return runService(t, args...).addr
}

// service is a tandem service running as its own process.
type service struct {
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// stop sends SIGTERM and waits for the process to exit.
func (s *service) stop(t *testing.T) {
	t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not exit within 30s of SIGTERM", s.addr)
	}
}

func runService(t *testing.T, args ...string) *service {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	cmd := exec.CommandContext(ctx, tandemBin, args...)
	cmd.Env = append(os.Environ(), fixtureModel)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	var logs strings.Builder
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			logs.WriteString(line + "\n")
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && strings.HasSuffix(rec.Msg, "listening") {
				select {
				case addr <- rec.Addr:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	done := make(chan struct{})
	go func() { <-logDone; _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		cancel()
		if t.Failed() {
			t.Logf("%v:\n%s", args, logs.String())
		}
	})
	select {
	case a := <-addr:
		return &service{addr: a, cmd: cmd, done: done}
	case <-time.After(time.Minute):
		t.Fatalf("%v did not log its address", args)
	}
	return nil
}

// waitHealthy polls `tandem health` until it exits 0, as a compose healthcheck does.
func waitHealthy(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := exec.Command(tandemBin, "health", addr).CombinedOutput()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never became healthy: %v %s", addr, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func listServices(t *testing.T, url string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rs := grpcreflect.NewClient(rpctest.Client(t), url, connect.WithGRPC()).NewStream(ctx)
	defer rs.Close()
	names, err := rs.ListServices()
	if err != nil {
		t.Fatalf("reflection on %s: %v", url, err)
	}
	var out []string
	for _, n := range names {
		out = append(out, string(n))
	}
	return out
}

// Each service runs as its own process with static discovery. Every port lists its
// services by reflection, a long prompt is prefilled on the prefill worker and a
// short one on the decode worker, and the response headers say which.
func TestSeparateProcesses(t *testing.T) {
	pre := startService(t, "prefill", "--listen", "127.0.0.1:0", "--id", "prefill-a")
	dec := startService(t, "decode", "--listen", "127.0.0.1:0", "--id", "decode-a", "--prefill-workers", pre, "--short-prefill-threshold", "32")
	rtr := startService(t, "router", "--listen", "127.0.0.1:0", "--decode-workers", dec, "--prefill-workers", pre)
	fe := startService(t, "frontend", "--listen", "127.0.0.1:0", "--router", rtr)
	for _, a := range []string{pre, dec, rtr, fe} {
		waitHealthy(t, a)
	}
	for addr, want := range map[string]string{
		pre: "tandem.prefill.v1.PrefillService", dec: "tandem.decode.v1.DecodeService",
		rtr: "tandem.router.v1.RouterService", fe: "tandem.frontend.v1.FrontendService",
	} {
		got := listServices(t, "http://"+addr)
		for _, w := range []string{want, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
			if !slices.Contains(got, w) {
				t.Errorf("%s lists %v, missing %s", addr, got, w)
			}
		}
	}

	// tandem route explains a decision without running the request.
	out, err := exec.Command(tandemBin, "route", "--router", rtr, "--explain", "Where would this go?").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "decode worker: decode-a") || !strings.Contains(string(out),
		"prefill #1: prefill-a") || !strings.Contains(string(out), "class all") {
		t.Errorf("tandem route: %v\n%s", err, out)
	}

	for _, tc := range []struct {
		prompt, path string
	}{
		{"Hi", "local"},
		{strings.Repeat("The quick brown fox jumps over the lazy dog. ", 12), "remote"},
	} {
		body := `{"model":"tandem-tiny","max_tokens":6,"messages":[{"role":"user","content":"` + tc.prompt + `"}]}`
		resp, err := http.Post("http://"+fe+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Tandem struct {
				PrefillPath   string `json:"prefill_path"`
				PrefillWorker string `json:"prefill_worker"`
				DecodeWorker  string `json:"decode_worker"`
			} `json:"tandem"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %d, decode error %v", resp.StatusCode, err)
		}
		if h := resp.Header.Get("x-tandem-prefill-path"); h != tc.path || out.Tandem.PrefillPath != tc.path {
			t.Errorf("prompt of %d chars: header %q, body %q, want %s", len(tc.prompt), h, out.Tandem.PrefillPath, tc.path)
		}
		if out.Tandem.DecodeWorker != "decode-a" || (tc.path == "remote" && out.Tandem.PrefillWorker != "prefill-a") {
			t.Errorf("workers %+v", out.Tandem)
		}
		if out.Usage.CompletionTokens != 6 {
			t.Errorf("completion_tokens %d, want 6", out.Usage.CompletionTokens)
		}
	}
	// The remote prefill's KV went through the prefill worker's KV transfer port.
	if v, _ := metricValue(pre, `tandem_prefill_sent_bytes_total{port="kv"}`); v == 0 {
		t.Errorf("no KV bytes sent through the KV transfer port")
	}
	if v, _ := metricValue(pre, `tandem_prefill_sent_bytes_total{port="main"}`); v != 0 {
		t.Errorf("%v KV bytes sent through the main port, want all on the KV transfer port", v)
	}
}

// A decode worker started before its static prefill worker says SERVING only once
// it knows it, so that when every service says SERVING the first long prompt is
// prefilled remotely, not fallen back for an unknown prefill worker.
func TestFirstRequestAfterServingGoesRemote(t *testing.T) {
	preAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	dec := startService(t, "decode", "--listen", "127.0.0.1:0", "--id", "decode-f", "--prefill-workers", preAddr, "--short-prefill-threshold", "32")
	time.Sleep(2 * time.Second) // the decode worker has tried, and failed, to reach it
	pre := startService(t, "prefill", "--listen", preAddr, "--kv-listen", "127.0.0.1:0", "--id", "prefill-f")
	rtr := startService(t, "router", "--listen", "127.0.0.1:0", "--decode-workers", dec, "--prefill-workers", pre)
	fe := startService(t, "frontend", "--listen", "127.0.0.1:0", "--router", rtr)
	for _, a := range []string{pre, dec, rtr, fe} {
		waitHealthy(t, a)
	}
	prompt := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 12)
	resp, err := http.Post("http://"+fe+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"tandem-tiny","max_tokens":4,"messages":[{"role":"user","content":"`+prompt+`"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if p := resp.Header.Get("x-tandem-prefill-path"); p != "remote" {
		t.Errorf("first request's prefill path %q, want remote: %s", p, body)
	}
}

// tandem drain works without Consul too: the drained worker says so in its event
// stream, the router stops sending it requests, and --undo brings it back.
func TestDrainWithStaticDiscovery(t *testing.T) {
	da := startService(t, "decode", "--listen", "127.0.0.1:0", "--id", "decode-s1")
	db := startService(t, "decode", "--listen", "127.0.0.1:0", "--id", "decode-s2")
	rtr := startService(t, "router", "--listen", "127.0.0.1:0", "--decode-workers", da+","+db)
	fe := startService(t, "frontend", "--listen", "127.0.0.1:0", "--router", rtr)
	waitHealthy(t, fe)
	seen := map[string]bool{}
	testutil.WaitForWithin(t, 30*time.Second, "both decode workers get requests", func() bool {
		w, _ := chat(t, fe, fmt.Sprintf("hello %d", len(seen)))
		seen[w] = true
		return seen["decode-s1"] && seen["decode-s2"]
	})
	if out, err := exec.Command(tandemBin, "drain", db).CombinedOutput(); err != nil {
		t.Fatalf("tandem drain: %v %s", err, out)
	}
	testutil.WaitForWithin(t, 10*time.Second, "tandem workers shows the worker draining", func() bool {
		out, err := exec.Command(tandemBin, "workers", "--router", rtr).CombinedOutput()
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); err == nil && len(f) == 4 && f[0] == "decode-s2" {
				return f[3] == "draining"
			}
		}
		return false
	})
	testutil.WaitForWithin(t, 10*time.Second, "requests stop reaching the drained worker", func() bool {
		for i := range 10 {
			if w, _ := chat(t, fe, fmt.Sprintf("who serves %d?", i)); w != "decode-s1" {
				return false
			}
		}
		return true
	})
	if out, err := exec.Command(tandemBin, "drain", db, "--undo").CombinedOutput(); err != nil {
		t.Fatalf("tandem drain --undo: %v %s", err, out)
	}
	clear(seen)
	testutil.WaitForWithin(t, 30*time.Second, "the undrained worker gets requests again", func() bool {
		w, _ := chat(t, fe, fmt.Sprintf("back %d", len(seen)))
		seen[w] = true
		return seen["decode-s2"]
	})
}
