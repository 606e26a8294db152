package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tandem-serve/tandem/console"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// consoleEvent is one server-sent event of /console/events.
type consoleEvent struct {
	name string
	data []byte
}

// consoleEvents reads the console's events at base (http[s]://host:port) with
// client and key, until the test ends. The first answer's status is returned;
// only a 200 streams.
func consoleEvents(t *testing.T, client *http.Client, base, key string) (int, <-chan consoleEvent) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/console/events", nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET /console/events: %v", err)
	}
	events := make(chan consoleEvent, 1024)
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		close(events)
		return resp.StatusCode, events
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("events answered with Content-Type %q", ct)
	}
	go func() {
		defer resp.Body.Close()
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 4<<20)
		var ev consoleEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = []byte(strings.TrimPrefix(line, "data: "))
			case line == "" && ev.name != "":
				select {
				case events <- ev:
				case <-ctx.Done():
					return
				}
				ev = consoleEvent{}
			}
		}
	}()
	return http.StatusOK, events
}

// nextEvent returns the next event named name whose data decodes into v and
// satisfies ok, failing the test after limit.
func nextEvent[T any](t *testing.T, events <-chan consoleEvent, name string, limit time.Duration, what string, ok func(T) bool) T {
	t.Helper()
	deadline := time.After(limit)
	for {
		select {
		case ev, open := <-events:
			if !open {
				t.Fatalf("waiting for %s: the events stream ended", what)
			}
			if ev.name != name {
				continue
			}
			var v T
			if err := json.Unmarshal(ev.data, &v); err != nil {
				t.Fatalf("%s event %s: %v", name, ev.data, err)
			}
			if ok == nil || ok(v) {
				return v
			}
		case <-deadline:
			t.Fatalf("no %s event with %s within %s", name, what, limit)
		}
	}
}

func dialRouter(t *testing.T, p *proc) (routerv1.RouterServiceClient, string) {
	t.Helper()
	var addr string
	select {
	case addr = <-p.routerAddr:
	case <-time.After(10 * time.Second):
		t.Fatal("tandem up did not print the router's address")
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return routerv1.NewRouterServiceClient(cc), addr
}

func workerInfo(t *testing.T, addr string) *workerv1.InfoResponse {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := workerv1.NewWorkerServiceClient(cc).Info(ctx, &workerv1.InfoRequest{})
	if err != nil {
		t.Fatalf("Info of %s: %v", addr, err)
	}
	return info
}

// The console's events tell what the router and the workers report: the fleet
// the router lists, each worker's pool and policy as the worker states them, each
// request's decision as its own response states it, and a drain within moments.
func TestConsoleEventsMatchTheFleet(t *testing.T) {
	p, url := startUp(t, "--decode", "2", "--prefill", "1")
	rc, _ := dialRouter(t, p)
	status, events := consoleEvents(t, http.DefaultClient, url, "")
	if status != http.StatusOK {
		t.Fatalf("GET /console/events: %d", status)
	}
	hello := nextEvent[console.Hello](t, events, "hello", 10*time.Second, "the greeting", nil)
	if hello.PolicyWritable || hello.WindowSeconds <= 0 || hello.Version == "" {
		t.Errorf("hello %+v: without Consul the policy is read-only", hello)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	listed, err := rc.ListWorkers(ctx, &routerv1.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	fleet := nextEvent(t, events, "fleet", 10*time.Second, "every worker the router lists", func(f console.Fleet) bool {
		return f.Connected && len(f.Workers) == len(listed.GetWorkers()) && f.Router != nil
	})
	if fleet.BlockSize != 16 || fleet.Router.ISLThreshold != 1024 || fleet.Router.PrefillWeight != 1 {
		t.Errorf("fleet: block size %d, router %+v; want the router's defaults", fleet.BlockSize, fleet.Router)
	}
	var drainAddr, drainID string
	for i, lw := range listed.GetWorkers() {
		w := fleet.Workers[i]
		mode := strings.ToLower(strings.TrimPrefix(lw.GetMode().String(), "WORKER_MODE_"))
		if w.ID != lw.GetId() || w.Address != lw.GetAddress() || w.Mode != mode || w.Draining {
			t.Errorf("console shows worker %+v; the router lists %v", w, lw)
		}
		info := workerInfo(t, lw.GetAddress())
		if !w.Reported || w.KVTotalBlocks != info.GetLoad().GetTotalBlocks() || w.KVTotalBlocks == 0 {
			t.Errorf("%s: console shows %d KV blocks (reported %v); the worker says %d", w.ID, w.KVTotalBlocks, w.Reported, info.GetLoad().GetTotalBlocks())
		}
		if got, want := w.PrefillPolicy != nil, info.GetInfo().GetPrefillPolicy() != ""; got != want ||
			(got && w.PrefillPolicy.Policy != info.GetInfo().GetPrefillPolicy()) {
			t.Errorf("%s: console shows prefill policy %+v; the worker says %q", w.ID, w.PrefillPolicy, info.GetInfo().GetPrefillPolicy())
		}
		if w.Mode == "decode" {
			drainAddr, drainID = w.Address, w.ID
		}
	}

	// A request's decision, as its own response tells it.
	id := "console-test-request"
	body := `{"max_tokens":6,"messages":[{"role":"user","content":"` + strings.Repeat("a prompt long enough to go remote ", 12) + `"}]}`
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var answer struct {
		Tandem struct {
			PrefillPath   string `json:"prefill_path"`
			PrefillReason string `json:"prefill_reason"`
			DecodeWorker  string `json:"decode_worker"`
			PrefillWorker string `json:"prefill_worker"`
		} `json:"tandem"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	err = json.NewDecoder(resp.Body).Decode(&answer)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("chat: %d, %v", resp.StatusCode, err)
	}
	r := nextEvent(t, events, "request", 10*time.Second, "the request's id", func(r console.Request) bool { return r.ID == id })
	if r.Path != answer.Tandem.PrefillPath || r.Reason != answer.Tandem.PrefillReason || r.Decode != answer.Tandem.DecodeWorker ||
		r.Prefill != answer.Tandem.PrefillWorker || r.Prompt != answer.Usage.PromptTokens || r.Completion != answer.Usage.CompletionTokens ||
		r.Finish != "length" || r.TTFTMs <= 0 || r.Endpoint != "chat_completions" {
		t.Errorf("console's request %+v; the response said %+v", r, answer)
	}
	tick := nextEvent(t, events, "tick", 10*time.Second, "the request counted", func(tk console.Tick) bool { return tk.Requests > 0 })
	counted := map[string]int{"local": tick.Paths.Local, "remote": tick.Paths.Remote, "fallback": tick.Paths.Fallback}
	if counted[r.Path] != 1 || tick.Reasons[r.Path+"/"+r.Reason] != 1 || tick.TTFT.Count != 1 || tick.Model != "tandem-tiny" {
		t.Errorf("tick %+v does not count the one %s request", tick, r.Path)
	}

	// tandem drain: the console says so within moments (pushed, not polled).
	start := time.Now()
	if out, err := exec.Command(tandemBin, "drain", drainAddr).CombinedOutput(); err != nil {
		t.Fatalf("tandem drain: %v %s", err, out)
	}
	nextEvent(t, events, "fleet", 10*time.Second, drainID+" draining", func(f console.Fleet) bool {
		i := slices.IndexFunc(f.Workers, func(w console.Worker) bool { return w.ID == drainID })
		return i >= 0 && f.Workers[i].Draining
	})
	t.Logf("the drain of %s reached the console's events %s after tandem drain started", drainID, time.Since(start).Round(time.Millisecond))
}

// With --api-keys-file, the console's data needs a key: the page itself (which
// holds none) loads, the events and the policy endpoint answer 401 without one.
func TestConsoleNeedsAKey(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte("# console test\nsk-console-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, url := startUp(t, "--api-keys-file", keys)

	resp, err := http.Get(url + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || resp.Header.Get("Content-Security-Policy") == "" {
		t.Errorf("GET /: %d %q (CSP %q); want the page", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Security-Policy"))
	}
	for _, key := range []string{"", "sk-wrong"} {
		if status, _ := consoleEvents(t, http.DefaultClient, url, key); status != http.StatusUnauthorized {
			t.Errorf("events with key %q: %d, want 401", key, status)
		}
		req, _ := http.NewRequest("POST", url+"/console/policy", strings.NewReader(`{"target":"router","value":{"queue_weight":2}}`))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("policy with key %q: %d, want 401", key, resp.StatusCode)
		}
	}
	status, events := consoleEvents(t, http.DefaultClient, url, "sk-console-1")
	if status != http.StatusOK {
		t.Fatalf("events with the key: %d", status)
	}
	nextEvent[console.Hello](t, events, "hello", 10*time.Second, "the greeting", nil)
	nextEvent(t, events, "fleet", 10*time.Second, "the workers", func(f console.Fleet) bool { return f.Connected && len(f.Workers) == 2 })
}

// --console=false serves the API alone.
func TestConsoleOff(t *testing.T) {
	_, url := startUp(t, "--console=false")
	for _, path := range []string{"/", "/console/events", "/console/console.js"} {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s with --console=false: %d, want 404", path, resp.StatusCode)
		}
	}
	if resp, err := http.Get(url + "/v1/models"); err != nil || resp.StatusCode != 200 {
		t.Errorf("the API without the console: %v %v", resp, err)
	}
}
