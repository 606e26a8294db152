package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// chatResult is what a client of /v1/chat/completions saw.
type chatResult struct {
	status       int
	path, reason string
	worker       string
	completion   int
	err          error
}

func chatFull(ctx context.Context, fe, content string, maxTokens int) chatResult {
	body := fmt.Sprintf(`{"model":"tandem-tiny","max_tokens":%d,"temperature":0,"messages":[{"role":"user","content":%q}]}`, maxTokens, content)
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+fe+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return chatResult{err: err}
	}
	defer resp.Body.Close()
	var out struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
		Tandem struct {
			PrefillPath   string `json:"prefill_path"`
			PrefillReason string `json:"prefill_reason"`
			DecodeWorker  string `json:"decode_worker"`
		} `json:"tandem"`
	}
	err = json.NewDecoder(resp.Body).Decode(&out)
	return chatResult{status: resp.StatusCode, path: out.Tandem.PrefillPath, reason: out.Tandem.PrefillReason,
		worker: out.Tandem.DecodeWorker, completion: out.Usage.CompletionTokens, err: err}
}

// longPrompt is about n tokens of text that starts differently for each i, so no
// two share a cached prefix.
func longPrompt(i, n int) string {
	return fmt.Sprintf("Request %d. ", i) + strings.Repeat("the prefill worker computes the cache ", n/6)
}

func metricValue(addr, sample string) (float64, bool) {
	out, err := exec.Command("curl", "-s", "--max-time", "5", "http://"+addr+"/metrics").Output()
	if err != nil {
		return 0, false
	}
	total, found := 0.0, false
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, sample) {
			fields := strings.Fields(line)
			var v float64
			if _, err := fmt.Sscan(fields[len(fields)-1], &v); err == nil {
				total, found = total+v, true
			}
		}
	}
	return total, found
}

// A prefill worker SIGKILLed while long prompts are being handed off: every request
// still completes, through the fallback, and the decode worker counts it.
func TestPrefillKilledMidHandoff(t *testing.T) {
	pre := runService(t, "prefill", "--listen", "127.0.0.1:0", "--id", "prefill-k")
	dec := runService(t, "decode", "--listen", "127.0.0.1:0", "--id", "decode-k", "--prefill-workers", pre.addr,
		"--short-prefill-threshold", "16", "--remote-deadline-min", "10s")
	rtr := startService(t, "router", "--listen", "127.0.0.1:0", "--decode-workers", dec.addr, "--prefill-workers", pre.addr)
	fe := startService(t, "frontend", "--listen", "127.0.0.1:0", "--router", rtr)
	waitHealthy(t, fe)

	const n = 8
	results := make([]chatResult, n)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = chatFull(ctx, fe, longPrompt(i, 3000), 8)
		}()
	}
	time.Sleep(150 * time.Millisecond)
	_ = pre.cmd.Process.Signal(syscall.SIGKILL)
	wg.Wait()
	// And after the kill, with the prefill worker gone.
	results = append(results, chatFull(ctx, fe, longPrompt(100, 3000), 8))

	paths := map[string]int{}
	for i, r := range results {
		if r.err != nil || r.status != 200 || r.completion != 8 {
			t.Errorf("request %d: status %d, %d tokens, err %v", i, r.status, r.completion, r.err)
		}
		paths[r.path]++
	}
	if paths["fallback"] == 0 || paths["local"] != 0 {
		t.Errorf("paths %v: want the remote ones cut off by the kill to fall back", paths)
	}
	if v, _ := metricValue(dec.addr, `tandem_prefill_decisions_total{path="fallback"`); int(v) != paths["fallback"] {
		t.Errorf("decode worker counted %v fallbacks, the clients saw %d", v, paths["fallback"])
	}
}

// A decode worker killed mid-stream: its clients get a clear error, not a hang,
// and later requests avoid it.
func TestDecodeKilled(t *testing.T) {
	d1 := runService(t, "decode", "--listen", "127.0.0.1:0", "--id", "decode-1", "--policy", "always-local")
	d2 := runService(t, "decode", "--listen", "127.0.0.1:0", "--id", "decode-2", "--policy", "always-local")
	rtr := startService(t, "router", "--listen", "127.0.0.1:0", "--decode-workers", d1.addr+","+d2.addr)
	fe := startService(t, "frontend", "--listen", "127.0.0.1:0", "--router", rtr)
	waitHealthy(t, fe)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type streamEnd struct {
		worker  string
		sawErr  bool
		sawDone bool
		err     error
	}
	started := make(chan string, 8)
	ends := make(chan streamEnd, 8)
	for i := range 4 {
		go func() {
			body := fmt.Sprintf(`{"model":"tandem-tiny","max_tokens":3000,"stream":true,"messages":[{"role":"user","content":"story %d"}]}`, i)
			req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+fe+"/v1/chat/completions", strings.NewReader(body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				ends <- streamEnd{err: err}
				return
			}
			defer resp.Body.Close()
			var e streamEnd
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				line, ok := strings.CutPrefix(sc.Text(), "data: ")
				if !ok {
					continue
				}
				if line == "[DONE]" {
					e.sawDone = true
					break
				}
				var chunk struct {
					Tandem *struct {
						DecodeWorker string `json:"decode_worker"`
					} `json:"tandem"`
					Error *struct{} `json:"error"`
				}
				_ = json.Unmarshal([]byte(line), &chunk)
				if chunk.Tandem != nil {
					e.worker = chunk.Tandem.DecodeWorker
					started <- e.worker
				}
				if chunk.Error != nil {
					e.sawErr = true
				}
			}
			ends <- e
		}()
	}
	on := map[string]int{}
	for range 4 {
		on[<-started]++
	}
	if on["decode-2"] == 0 {
		t.Fatalf("no stream on decode-2 to cut: %v", on)
	}
	_ = d2.cmd.Process.Signal(syscall.SIGKILL)
	cut := 0
	for range on["decode-2"] {
		// Only decode-2's streams end now; decode-1's run on for seconds.
		select {
		case e := <-ends:
			if e.worker == "decode-2" {
				cut++
				if !e.sawErr {
					t.Errorf("stream on the killed worker ended without an error event (done=%v, err=%v)", e.sawDone, e.err)
				}
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a stream on the killed worker hangs")
		}
	}
	cancel()
	if cut == 0 {
		t.Fatalf("no stream on decode-2 ended")
	}
	for i := range 10 {
		r := chatFull(context.Background(), fe, fmt.Sprintf("after the kill %d", i), 4)
		if r.status != 200 || r.worker != "decode-1" {
			t.Fatalf("request %d after the kill: status %d on %q (%v)", i, r.status, r.worker, r.err)
		}
	}
}

// A slow or partitioned link between decode and prefill: the deadline fires and
// the request falls back to local prefill.
func TestSlowAndPartitionedPrefillLink(t *testing.T) {
	// Both of the prefill worker's ports sit behind fault proxies: the main one, which
	// the decode worker discovers it by, and the KV transfer port, which it learns
	// from WorkerInfo (told the proxy's port by --kv-advertise-port).
	kvPort := freePort(t)
	kvProxy := newFaultProxy(t, fmt.Sprintf("127.0.0.1:%d", kvPort))
	pre := runService(t, "prefill", "--listen", "127.0.0.1:0", "--id", "prefill-p",
		"--kv-listen", fmt.Sprintf("127.0.0.1:%d", kvPort), "--kv-advertise-port", fmt.Sprint(kvProxy.ln.Addr().(*net.TCPAddr).Port))
	proxy := newFaultProxy(t, pre.addr)
	dec := runService(t, "decode", "--listen", "127.0.0.1:0", "--id", "decode-p", "--prefill-workers", proxy.Addr(),
		"--short-prefill-threshold", "16", "--remote-deadline-min", "1s", "--remote-deadline-max", "1500ms")
	rtr := startService(t, "router", "--listen", "127.0.0.1:0", "--decode-workers", dec.addr, "--prefill-workers", pre.addr)
	fe := startService(t, "frontend", "--listen", "127.0.0.1:0", "--router", rtr)
	waitHealthy(t, fe)
	ctx := context.Background()
	eventually(t, 30*time.Second, "a long prompt goes remote over the healthy link", func() bool {
		return chatFull(ctx, fe, longPrompt(int(time.Now().UnixNano()%1e6), 300), 4).path == "remote"
	})

	if v, _ := metricValue(pre.addr, `tandem_prefill_sent_bytes_total{port="kv"}`); v == 0 {
		t.Fatalf("the remote prefill moved no bytes through the KV transfer port")
	}

	proxy.delay.Store(int64(3 * time.Second))
	kvProxy.delay.Store(int64(3 * time.Second))
	r := chatFull(ctx, fe, longPrompt(1, 300), 4)
	if r.status != 200 || r.path != "fallback" || r.reason != "remote_timeout" {
		t.Errorf("slow link: status %d path %q reason %q, want fallback remote_timeout", r.status, r.path, r.reason)
	}
	proxy.delay.Store(0)
	kvProxy.delay.Store(0)
	// A partition of the data path alone: the worker still looks healthy.
	kvProxy.blackhole.Store(true)
	r = chatFull(ctx, fe, longPrompt(2, 300), 4)
	if r.status != 200 || r.path != "fallback" || r.reason != "remote_timeout" {
		t.Errorf("partition: status %d path %q reason %q, want fallback remote_timeout", r.status, r.path, r.reason)
	}
	kvProxy.blackhole.Store(false)
}

// A client that disconnects mid-stream frees the blocks its request held, on the
// decode worker and on the prefill worker.
func TestClientDisconnectFreesBlocks(t *testing.T) {
	pre := runService(t, "prefill", "--listen", "127.0.0.1:0", "--id", "prefill-d")
	dec := runService(t, "decode", "--listen", "127.0.0.1:0", "--id", "decode-d", "--prefill-workers", pre.addr, "--short-prefill-threshold", "16")
	rtr := startService(t, "router", "--listen", "127.0.0.1:0", "--decode-workers", dec.addr, "--prefill-workers", pre.addr)
	fe := startService(t, "frontend", "--listen", "127.0.0.1:0", "--router", rtr)
	waitHealthy(t, fe)

	for i, content := range []string{"short", longPrompt(7, 2000)} {
		ctx, cancel := context.WithCancel(context.Background())
		body := fmt.Sprintf(`{"model":"tandem-tiny","max_tokens":3000,"stream":true,"messages":[{"role":"user","content":%q}]}`, content)
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+fe+"/v1/chat/completions", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		for got := 0; got < 4 && sc.Scan(); {
			if strings.HasPrefix(sc.Text(), "data: ") {
				got++
			}
		}
		if v, _ := metricValue(dec.addr, `tandem_kv_cache_blocks{state="active"}`); v == 0 {
			t.Errorf("request %d: no active blocks while streaming; the check below would prove nothing", i)
		}
		cancel()
		resp.Body.Close()
		for _, w := range []*service{dec, pre} {
			eventually(t, 15*time.Second, fmt.Sprintf("request %d: %s frees its blocks", i, w.addr), func() bool {
				v, ok := metricValue(w.addr, `tandem_kv_cache_blocks{state="active"}`)
				return ok && v == 0
			})
		}
	}
}
