package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/internal/testutil"
	"github.com/tandem-serve/tandem/internal/testutil/soaktest"
)

// TestSoakThroughUp is issue 9's bounded soak through the real binary: concurrent
// streamed chat completions over the OpenAI HTTP API against `tandem up` (frontend,
// router, one decode and one prefill worker in one process), while clients cancel
// mid-stream and the prefill worker is drained and undrained over and over with
// `tandem drain`, as an operator would. It reports the requests that failed (goal
// 0: a drained prefill worker must mean a fallback, never an error) and the KV
// blocks still held once the load stops (goal 0), and fails if either is not zero,
// or if the process's goroutines do not come back to their baseline.
//
// Plain `go test` runs a short version (16 streams for 5 s) so that CI exercises it;
// the full one is
//
//	TANDEM_SOAK=1 go test -run '^TestSoakThroughUp$' -v -timeout 15m ./integration/
//
// Settings (environment; they apply with or without TANDEM_SOAK=1):
//
//	TANDEM_SOAK_DURATION  how long new requests are started (default 60s; 5s short)
//	TANDEM_SOAK_STREAMS   concurrent streams (default 256; 16 short)
//	TANDEM_SOAK_FAULTS    how long the prefill worker stays drained, then serving (default 5s; 1s short)
//
// Prompts: three in eight short (local, below the decode worker's default
// threshold of 128 tokens), three in eight long and unique (remote while the
// prefill worker serves, fallback while it is drained), two in eight a long shared
// prefix plus a short question (local once the decode worker caches the prefix).
// One request in eight is cancelled by its client: before the response starts or
// after a random number of events. If by the end of the duration some path
// (local, remote, fallback) or a cancellation has not been seen, requests go on
// until it is, for at most another 60 s; the test fails if one is still missing.
func TestSoakThroughUp(t *testing.T) {
	full := os.Getenv("TANDEM_SOAK") == "1"
	duration, streams, faultPeriod := 5*time.Second, 16, time.Second
	if full {
		duration, streams, faultPeriod = time.Minute, 256, 5*time.Second
	}
	duration = soaktest.Duration(t, "TANDEM_SOAK_DURATION", duration)
	faultPeriod = soaktest.Duration(t, "TANDEM_SOAK_FAULTS", faultPeriod)
	streams = soaktest.Count(t, "TANDEM_SOAK_STREAMS", streams)

	// Info logs carry the addresses of the services `tandem up` started.
	p, url := startUp(t, "--log-level", "info")
	addrs := upAddresses(t, p)
	dec, pre := addrs.Decode[0], addrs.Prefill[0]
	frontend := strings.TrimPrefix(url, "http://")
	transport := &http.Transport{MaxIdleConnsPerHost: streams + 8}
	t.Cleanup(transport.CloseIdleConnections)
	client := &http.Client{Transport: transport}

	// Warm up every connection between the services, then take the baselines.
	testutil.WaitForWithin(t, 30*time.Second, "a long prompt goes remote through tandem up", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r := soakStream(ctx, client, url, soakBody(longPrompt(-100, 240), 4, 0, 1), -1, cancel)
		return r.status == 200 && r.path == "remote" && r.sawDone
	})
	if r := soakStream(context.Background(), client, url, soakBody("Hello there", 4, 0, 1), -1, nil); r.status != 200 || r.path != "local" {
		t.Fatalf("a short prompt: status %d, path %q, err %v", r.status, r.path, r.err)
	}
	transport.CloseIdleConnections()
	baseBlocks := map[string]poolState{}
	for _, w := range []string{dec, pre} {
		testutil.WaitForWithin(t, 30*time.Second, w+" holds no active blocks after the warm-up", func() bool {
			st, ok := readPool(w)
			baseBlocks[w] = st
			return ok && st.active == 0 && st.running == 0 && st.waiting == 0
		})
	}
	baseGoroutines := minGoroutines(frontend, 5)

	var (
		mu       sync.Mutex
		outcomes = map[string]int{} // path and reason, or how the client cancelled
		errs     = map[string]int{}
		paths    = map[string]int{}
		requests atomic.Int64
		tokens   atomic.Int64
	)
	note := func(m map[string]int, key string) {
		mu.Lock()
		m[key]++
		mu.Unlock()
	}
	covered := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return paths["local"] > 0 && paths["remote"] > 0 && paths["fallback"] > 0 && outcomes["cancelled mid-stream"] > 0
	}

	// The fault: the prefill worker, drained and undrained with `tandem drain`.
	var drains atomic.Int64
	stopFaults, faultsDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(faultsDone)
		drained := false
		toggle := func() {
			args := []string{"drain", pre}
			if drained {
				args = append(args, "--undo")
			}
			if out, err := exec.Command(tandemBin, args...).CombinedOutput(); err != nil {
				t.Errorf("tandem %s: %v %s", strings.Join(args, " "), err, out)
				return
			}
			if drained = !drained; drained {
				drains.Add(1)
			}
		}
		tick := time.NewTicker(faultPeriod)
		defer tick.Stop()
		for {
			select {
			case <-stopFaults:
				if drained {
					toggle()
				}
				return
			case <-tick.C:
				toggle()
			}
		}
	}()

	prefixes := make([]string, 4)
	for i := range prefixes {
		prefixes[i] = longPrompt(-1-i, 240)
	}
	start := time.Now()
	end, hardEnd := start.Add(duration), start.Add(duration+time.Minute)
	more := func() bool {
		now := time.Now()
		return now.Before(end) || (now.Before(hardEnd) && !covered())
	}
	var wg sync.WaitGroup
	for w := range streams {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for i := 0; more(); i++ {
				n := int(requests.Add(1))
				var content string
				switch k := rng.IntN(8); {
				case k < 3:
					content = fmt.Sprintf("Stream %d, question %d: what is %d plus %d?", w, i, rng.IntN(1000), rng.IntN(1000))
				case k < 6:
					content = longPrompt(n, 180+rng.IntN(240))
				default:
					content = prefixes[rng.IntN(len(prefixes))] + fmt.Sprintf(" Question %d from stream %d.", i, w)
				}
				maxTokens := 4 + rng.IntN(29)
				body := soakBody(content, maxTokens, float64(rng.IntN(3))*0.5, rng.Uint64()>>1)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				cancelAfter := -1 // data events before the client cancels; -1: it does not
				var timer *time.Timer
				if rng.IntN(8) == 0 {
					if rng.IntN(4) == 0 {
						// Anywhere: while routed, prefilled (remotely or not), or streaming.
						timer = time.AfterFunc(time.Duration(rng.IntN(100))*time.Millisecond, cancel)
					} else {
						cancelAfter = rng.IntN(maxTokens + 1)
					}
				}
				r := soakStream(ctx, client, url, body, cancelAfter, cancel)
				timerFired := timer != nil && !timer.Stop()
				cancelled := !r.sawDone && (cancelAfter >= 0 || timerFired) && ctx.Err() == context.Canceled
				timedOut := !r.sawDone && ctx.Err() == context.DeadlineExceeded
				cancel()
				switch {
				case cancelled && r.status != 0 && r.status != 200:
					note(errs, fmt.Sprintf("status %d before the client cancelled: %s", r.status, soaktest.Trim(r.errMsg)))
				case cancelled && r.status == 0:
					note(outcomes, "cancelled before the response")
				case cancelled:
					note(outcomes, "cancelled mid-stream")
				case timedOut:
					note(errs, "no answer within 2 minutes")
				default:
					if e := r.check(maxTokens); e != "" {
						note(errs, e)
						continue
					}
					tokens.Add(int64(r.completion))
					note(paths, r.path)
					note(outcomes, r.path+" "+r.reason)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stopFaults)
	<-faultsDone
	transport.CloseIdleConnections()

	// Leaked blocks: whatever each engine still holds once nothing runs.
	leaked, after := map[string]int{}, map[string]poolState{}
	for _, w := range []string{dec, pre} {
		deadline := time.Now().Add(time.Minute)
		for {
			st, ok := readPool(w)
			after[w] = st
			held := baseBlocks[w].total() - st.free - st.cached
			if ok && held == 0 && st.running == 0 && st.waiting == 0 {
				break
			}
			if time.Now().After(deadline) {
				leaked[w] = held
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// Goroutines: back to the baseline, give or take the service connections that a
	// burst of load may have added and that idle out on their own time.
	const slack = 10
	goroutines := 0
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		goroutines = minGoroutines(frontend, 1)
		if goroutines <= baseGoroutines+slack || time.Now().After(deadline) {
			break
		}
	}

	lines, total, nerr := soaktest.Tally(outcomes, errs)
	leakedBlocks := 0
	for _, v := range leaked {
		leakedBlocks += v
	}
	t.Logf("soak through tandem up: %d streams, %s of new requests (%s until the last ended), prefill worker drained %d times for %s each",
		streams, duration, elapsed.Round(time.Millisecond), drains.Load(), faultPeriod)
	t.Logf("soak: %d requests (%.1f/s), %d completion tokens (%.0f/s); paths %v", total, float64(total)/elapsed.Seconds(),
		tokens.Load(), float64(tokens.Load())/elapsed.Seconds(), paths)
	t.Logf("soak: outcomes:\n%s", strings.Join(lines, "\n"))
	t.Logf("soak: errors %d, leaked blocks %d (decode %+v, prefill %+v; before the load decode %+v, prefill %+v)",
		nerr, leakedBlocks, after[dec], after[pre], baseBlocks[dec], baseBlocks[pre])
	t.Logf("soak: goroutines in tandem up %d before the load, %d after", baseGoroutines, goroutines)
	t.Logf("soak: warnings and errors tandem up logged:\n%s", soakWarnings(p.logs()))

	if nerr != 0 {
		t.Errorf("%d requests failed; goal 0", nerr)
	}
	if len(leaked) != 0 {
		t.Errorf("KV blocks still held a minute after the load: %v (goal 0)", leaked)
	}
	if goroutines > baseGoroutines+slack {
		t.Errorf("tandem up has %d goroutines after the load, %d before (%d allowed for idle connections)", goroutines, baseGoroutines, slack)
	}
	for _, path := range []string{"local", "remote", "fallback"} {
		if paths[path] == 0 {
			t.Errorf("no request took the %s path; the soak did not exercise it", path)
		}
	}
	// The shared prefixes were served from the decode worker's prefix cache, and
	// its counters say so (hits within queries).
	hits, _ := metricValue(dec, "tandem_prefix_cache_hits_total ")
	queries, _ := metricValue(dec, "tandem_prefix_cache_queries_total ")
	t.Logf("soak: decode worker's prefix cache: %.0f of %.0f prompt tokens hit", hits, queries)
	if hits <= 0 || hits > queries {
		t.Errorf("decode worker's prefix cache counters: %.0f hits of %.0f queried tokens, want some hits, no more than queried", hits, queries)
	}
	if outcomes["cancelled mid-stream"] == 0 {
		t.Errorf("no client cancelled mid-stream; the soak did not exercise it")
	}
	if drains.Load() == 0 {
		t.Errorf("the prefill worker was never drained")
	}
}

// upServices is what `tandem up` logs once every service is ready.
type upServices struct {
	Router  string   `json:"router"`
	Decode  []string `json:"decode_workers"`
	Prefill []string `json:"prefill_workers"`
}

// upAddresses reads the workers' addresses from up's "services ready" log line
// (logged at info, just before "ready:" on stdout).
func upAddresses(t *testing.T, p *proc) upServices {
	t.Helper()
	var s upServices
	testutil.WaitForWithin(t, 10*time.Second, "tandem up logs its services' addresses", func() bool {
		for _, line := range strings.Split(p.logs(), "\n") {
			var rec struct {
				Msg string `json:"msg"`
				upServices
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "services ready" {
				s = rec.upServices
				return true
			}
		}
		return false
	})
	if len(s.Decode) != 1 || len(s.Prefill) != 1 {
		t.Fatalf("tandem up started decode workers %v and prefill workers %v, want one of each", s.Decode, s.Prefill)
	}
	return s
}

// soakWarnings counts the WARN and ERROR lines of up's logs by service, message,
// reason and error, numbers trimmed.
func soakWarnings(logs string) string {
	counts := map[string]int{}
	for _, line := range strings.Split(logs, "\n") {
		var rec struct {
			Level   string `json:"level"`
			Service string `json:"service"`
			Msg     string `json:"msg"`
			Reason  string `json:"reason"`
			Err     string `json:"err"`
			Error   string `json:"error"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil || (rec.Level != "WARN" && rec.Level != "ERROR") {
			continue
		}
		key := strings.TrimSpace(fmt.Sprintf("%s %s: %s %s %s%s", rec.Level, rec.Service, rec.Msg, rec.Reason, rec.Err, rec.Error))
		counts[soaktest.Trim(key)]++
	}
	var lines []string
	for k, v := range counts {
		lines = append(lines, fmt.Sprintf("  %6d  %s", v, k))
	}
	sort.Strings(lines)
	if len(lines) == 0 {
		return "  none"
	}
	return strings.Join(lines, "\n")
}

// poolState is a worker's KV block pool and queue, from its /metrics.
type poolState struct{ free, cached, active, running, waiting int }

func (s poolState) total() int { return s.free + s.cached + s.active }

func readPool(addr string) (poolState, bool) {
	var s poolState
	for _, m := range []struct {
		sample string
		v      *int
	}{
		{`tandem_kv_cache_blocks{state="free"}`, &s.free},
		{`tandem_kv_cache_blocks{state="cached"}`, &s.cached},
		{`tandem_kv_cache_blocks{state="active"}`, &s.active},
		{"tandem_num_requests_running ", &s.running},
		{"tandem_num_requests_waiting ", &s.waiting},
	} {
		v, ok := metricValue(addr, m.sample)
		if !ok {
			return s, false
		}
		*m.v = int(v)
	}
	return s, true
}

// minGoroutines is the least of n readings of go_goroutines, 100 ms apart: the
// services of `tandem up` share one process, so any of its ports reports them all.
func minGoroutines(addr string, n int) int {
	least := -1
	for i := range n {
		if i > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		if v, ok := metricValue(addr, "go_goroutines "); ok && (least < 0 || int(v) < least) {
			least = int(v)
		}
	}
	return least
}
