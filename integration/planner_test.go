package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/internal/testutil"
)

// A deployment with the planner on (one decode worker, two lenders, sim
// engines, a real Consul) moves a lender to prefill when long prompts join
// short ones, without a restart: requests run throughout and none fails, and
// the engines hold no block once they are done. The plan and its reason are in
// Consul KV; a pin freezes it.
func TestPlannerMovesALenderAtRunTime(t *testing.T) {
	a := startConsul(t)
	// Checks with room to spare: on a loaded 2-core machine a 400 ms timeout can
	// mark a busy service critical, which is not what this test is about.
	consulFlags := []string{"--consul", a.Addr, "--check-interval", "2s", "--check-timeout", "2s"}
	with := func(args ...string) []string { return append(args, consulFlags...) }
	sim := []string{"--engine", "sim"}

	workers := []*service{runService(t, with(append([]string{"decode", "--listen", "127.0.0.1:0", "--id", "decode-p1"}, sim...)...)...)}
	for _, id := range []string{"lender-1", "lender-2"} {
		workers = append(workers, runService(t, with(append([]string{"decode", "--mode", "aggregated", "--lend-prefill", "--kv-listen", "127.0.0.1:0",
			"--listen", "127.0.0.1:0", "--id", id}, sim...)...)...))
	}
	runService(t, with("router", "--listen", "127.0.0.1:0", "--planner", "--planner-interval", "300ms", "--planner-dwell", "1s",
		"--planner-hysteresis", "0.05", "--planner-smoothing", "0.5", "--planner-output-tokens", "64")...)
	fe := runService(t, with("frontend", "--listen", "127.0.0.1:0")...)
	testutil.WaitForWithin(t, 30*time.Second, "three workers passing in Consul", func() bool { return len(passing(t, a, "tandem-decode")) == 3 })
	waitHealthy(t, fe.addr)

	type plan struct {
		Reason   string            `json:"reason"`
		Roles    map[string]string `json:"roles"`
		Pinned   bool              `json:"pinned"`
		Switched bool              `json:"switched"`
		Shape    struct {
			Prefill int `json:"Prefill"`
		} `json:"shape"`
	}
	readPlan := func() (plan, bool) {
		var p plan
		pair, _, err := a.API.KV().Get("tandem/planner/plan", nil)
		if err != nil || pair == nil {
			return p, false
		}
		return p, json.Unmarshal(pair.Value, &p) == nil
	}
	prefilling := func(p plan) int {
		n := 0
		for _, r := range p.Roles {
			if r == "prefill" {
				n++
			}
		}
		return n
	}

	// Load: clients sending fresh prompts (no prefix cache to help), a share of them long.
	var (
		longShare atomic.Int64 // in percent
		sent, bad atomic.Int64
		seq       atomic.Int64
		stop      = make(chan struct{})
		wg        sync.WaitGroup
		firstErr  sync.Once
		errText   string
	)
	short := strings.Repeat("word ", 40)
	long := strings.Repeat("a much longer prompt with many words in it ", 400)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := seq.Add(1)
				body := short
				if n%100 < longShare.Load() {
					body = long
				}
				sent.Add(1)
				if err := sendCompletion(fe.addr, fmt.Sprintf("request %d: %s", n, body)); err != nil {
					bad.Add(1)
					firstErr.Do(func() { errText = err.Error() })
				}
			}
		}()
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
	}()

	testutil.WaitForWithin(t, 30*time.Second, "a plan with every lender decoding for short prompts", func() bool {
		p, ok := readPlan()
		return ok && len(p.Roles) == 2 && prefilling(p) == 0
	})
	longShare.Store(20)
	var moved plan
	testutil.WaitForWithin(t, 60*time.Second, "the planner moves a lender to prefill as long prompts join", func() bool {
		p, ok := readPlan()
		moved = p
		return ok && prefilling(p) >= 1
	})
	t.Logf("plan: %s (roles %v)", moved.Reason, moved.Roles)
	if !strings.Contains(moved.Reason, "gain") {
		t.Errorf("the plan's reason %q does not say its gain", moved.Reason)
	}
	// Requests keep running across the switch, and the lender now prefills for the decode worker.
	time.Sleep(2 * time.Second)

	// Pinned at one lender prefilling, the plan holds when the long prompts go.
	if out, err := exec.Command(tandemBin, "config", "--consul", a.Addr, "set", "planner", `{"pin": {"prefil": 1}}`).CombinedOutput(); err == nil {
		t.Errorf("tandem config set planner took a misspelt field: %s", out)
	}
	if out, err := exec.Command(tandemBin, "config", "--consul", a.Addr, "set", "planner", `{"pin": {"prefill": 1, "isl_threshold": 1024}}`).CombinedOutput(); err != nil {
		t.Fatalf("tandem config set planner: %v %s", err, out)
	}
	testutil.WaitForWithin(t, 10*time.Second, "the plan is pinned at one lender prefilling", func() bool {
		p, ok := readPlan()
		return ok && p.Pinned && prefilling(p) == 1
	})
	longShare.Store(0)
	time.Sleep(3 * time.Second) // ten intervals of short prompts only
	if p, _ := readPlan(); !p.Pinned || prefilling(p) != 1 {
		t.Errorf("pinned, the plan moved: %s (roles %v)", p.Reason, p.Roles)
	}
	close(stop)
	wg.Wait()
	if n := bad.Load(); n != 0 {
		t.Errorf("%d of %d requests failed across the switch (first: %s)", n, sent.Load(), errText)
	}
	t.Logf("%d requests, %d failed", sent.Load(), bad.Load())

	// No engine holds a block once nothing runs.
	for _, w := range workers {
		testutil.WaitForWithin(t, 30*time.Second, w.addr+" holds no block", func() bool {
			st, ok := readPool(w.addr)
			return ok && st.active == 0 && st.running == 0 && st.waiting == 0
		})
	}
}

// sendCompletion sends one completion and says what went wrong, if anything.
func sendCompletion(frontend, prompt string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, _ := json.Marshal(struct {
		Prompt    string `json:"prompt"`
		MaxTokens int    `json:"max_tokens"`
	}{prompt, 16})
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+frontend+"/v1/completions", strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	return nil
}
