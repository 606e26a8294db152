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

	"github.com/tandem-serve/tandem/internal/testutil"
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
	body := fmt.Sprintf(`{"max_tokens":%d,"temperature":0,"messages":[{"role":"user","content":%q}]}`, maxTokens, content)
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

// streamedChat is what a client of a streamed /v1/chat/completions saw.
type streamedChat struct {
	status       int
	path, reason string // from the first chunk's tandem field
	text         string
	completion   int  // usage.completion_tokens of the usage chunk
	done         bool // the stream ended with data: [DONE]
	errEvent     bool // an error object came in the stream
	err          error
}

func chatStreamed(ctx context.Context, fe, content string, maxTokens int) streamedChat {
	body := fmt.Sprintf(`{"max_tokens":%d,"temperature":0,"stream":true,"stream_options":{"include_usage":true},`+
		`"messages":[{"role":"user","content":%q}]}`, maxTokens, content)
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+fe+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return streamedChat{err: err}
	}
	defer resp.Body.Close()
	r := streamedChat{status: resp.StatusCode}
	var text strings.Builder
	done, err := eachSSE(resp.Body, func(line string) bool {
		var chunk sseChunk
		if err := json.Unmarshal([]byte(line), &chunk); err != nil {
			r.err = fmt.Errorf("chunk %q: %w", line, err)
			return true
		}
		for _, c := range chunk.Choices {
			text.WriteString(c.Delta.Content)
		}
		if chunk.Usage != nil {
			r.completion = chunk.Usage.CompletionTokens
		}
		if chunk.Tandem != nil && r.path == "" {
			r.path, r.reason = chunk.Tandem.PrefillPath, chunk.Tandem.PrefillReason
		}
		if chunk.Error != nil {
			r.errEvent = true
		}
		return true
	})
	r.done, r.text = done, text.String()
	if r.err == nil {
		r.err = err
	}
	return r
}

// kvBehindProxy starts a prefill worker whose KV transfer port is reached only
// through a fault proxy: decode workers learn the proxy's port from it.
func kvBehindProxy(t *testing.T, args ...string) (*service, *faultProxy) {
	t.Helper()
	kvPort := freePort(t)
	kvProxy := newFaultProxy(t, fmt.Sprintf("127.0.0.1:%d", kvPort))
	pre := runService(t, append([]string{"prefill", "--listen", "127.0.0.1:0",
		"--kv-listen", fmt.Sprintf("127.0.0.1:%d", kvPort), "--kv-advertise-port", fmt.Sprint(kvProxy.ln.Addr().(*net.TCPAddr).Port)}, args...)...)
	return pre, kvProxy
}

// warmKVPort waits until the decode worker sends remote prefills to the KV
// transfer port (it learns the port from the prefill worker; until then it uses
// the main port, which no proxy sits in front of). Each try is a prompt of about
// tokens tokens that shares no prefix with any other prompt of the tests.
func warmKVPort(t *testing.T, fe string, pre *service, tokens int) {
	t.Helper()
	try := 0
	testutil.WaitForWithin(t, 45*time.Second, "a remote prefill goes through the KV transfer port", func() bool {
		try++
		r := chatFull(context.Background(), fe, longPrompt(1000+try, tokens), 2)
		v, _ := metricValue(pre.addr, `tandem_prefill_sent_bytes_total{port="kv"}`)
		return r.path == "remote" && v > 0
	})
}

// A prefill worker SIGKILLed while long prompts are being handed off, under
// concurrent load: every client still gets its whole streamed answer, through the
// fallback, and the decode worker counts each fallback with its reason, at least
// one of them a KV transfer cut in the middle.
//
// The kill is timed by the KV traffic, not by a clock. The KV transfer port sits
// behind a fault proxy that, the first time one prefill's stream has carried its
// header and a whole first chunk (a chunk is 1 MiB; 1 MiB + 4 KiB covers both with
// their framing), SIGKILLs the prefill worker and drops its connections before
// passing another byte, as the network does when the host dies. Each prompt's KV
// is about 1.8 MB (two chunks of the tiny model's 16 KiB blocks) and the proxy
// passes at most 32 KiB at a time, so at that moment no handoff has finished and
// the decode worker has imported a chunk of at least one: every run, at least one
// request falls back with remote_error_mid_transfer and none went remote.
func TestPrefillKilledMidHandoff(t *testing.T) {
	pre, kvProxy := kvBehindProxy(t, "--id", "prefill-k")
	dec := runService(t, "decode", "--listen", "127.0.0.1:0", "--id", "decode-k", "--prefill-workers", pre.addr,
		"--short-prefill-threshold", "16", "--remote-deadline-min", "20s")
	rtr := startService(t, "router", "--listen", "127.0.0.1:0", "--decode-workers", dec.addr, "--prefill-workers", pre.addr)
	fe := startService(t, "frontend", "--listen", "127.0.0.1:0", "--router", rtr)
	waitHealthy(t, fe)
	// About 350 tokens: 22 blocks, 360 KB of KV, well short of the cut.
	warmKVPort(t, fe, pre, 300)
	killed := make(chan struct{})
	kvProxy.tripAfterStreamData(1<<20+4<<10, true, func() {
		_ = pre.cmd.Process.Signal(syscall.SIGKILL)
		close(killed)
	})

	const n = 6
	results := make([]streamedChat, n)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// About 1780 tokens: 111 blocks, two chunks.
			results[i] = chatStreamed(ctx, fe, longPrompt(i, 1500), 8)
		}()
	}
	wg.Wait()
	select {
	case <-killed:
	default:
		t.Fatalf("no prefill stream carried 1 MiB through the KV transfer port, so the prefill worker was never killed; the clients saw %+v", results)
	}
	// And after the kill, with the prefill worker gone.
	results = append(results, chatStreamed(ctx, fe, longPrompt(100, 1500), 8))

	reasons := map[string]int{}
	for i, r := range results {
		if r.err != nil || r.status != 200 || !r.done || r.errEvent || r.completion != 8 || r.text == "" {
			t.Errorf("request %d: status %d, [DONE] %v, error event %v, %d tokens %q, err %v", i, r.status, r.done, r.errEvent, r.completion, r.text, r.err)
		}
		if r.path != "fallback" {
			t.Errorf("request %d: prefill path %q (%s), want fallback: no handoff can have finished before the kill", i, r.path, r.reason)
		}
		reasons[r.reason]++
	}
	if reasons["remote_error_mid_transfer"] == 0 {
		t.Errorf("fallback reasons %v: the kill cut no KV transfer in the middle", reasons)
	}
	// The decode worker counts what the clients saw, reason by reason.
	for reason, want := range reasons {
		if v, _ := metricValue(dec.addr, fmt.Sprintf(`tandem_decode_fallbacks_total{reason=%q}`, reason)); int(v) != want {
			t.Errorf("decode worker counted %v fallbacks for %s, the clients saw %d", v, reason, want)
		}
		if v, _ := metricValue(dec.addr, fmt.Sprintf(`tandem_prefill_decisions_total{path="fallback",reason=%q}`, reason)); int(v) != want {
			t.Errorf("decode worker counted %v fallback decisions for %s, the clients saw %d", v, reason, want)
		}
	}
	if v, _ := metricValue(dec.addr, `tandem_decode_fallbacks_total{`); int(v) != len(results) {
		t.Errorf("decode worker counted %v fallbacks in all, the clients saw %d", v, len(results))
	}
	t.Logf("fallback reasons: %v", reasons)
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
			body := fmt.Sprintf(`{"max_tokens":3000,"stream":true,"messages":[{"role":"user","content":"story %d"}]}`, i)
			req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+fe+"/v1/chat/completions", strings.NewReader(body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				ends <- streamEnd{err: err}
				return
			}
			defer resp.Body.Close()
			var e streamEnd
			e.sawDone, _ = eachSSE(resp.Body, func(line string) bool {
				var chunk sseChunk
				_ = json.Unmarshal([]byte(line), &chunk)
				if chunk.Tandem != nil {
					e.worker = chunk.Tandem.DecodeWorker
					started <- e.worker
				}
				if chunk.Error != nil {
					e.sawErr = true
				}
				return true
			})
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
	testutil.WaitForWithin(t, 30*time.Second, "a long prompt goes remote over the healthy link", func() bool {
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

// metricsText is one scrape of a service's /metrics.
type metricsText string

// scrape reads addr's /metrics, trying again for a while if it cannot: a
// missing scrape would read as zeros.
func scrape(addr string) metricsText {
	var out []byte
	for try := 0; try < 20; try++ {
		var err error
		if out, err = exec.Command("curl", "-s", "--max-time", "5", "http://"+addr+"/metrics").Output(); err == nil && strings.Contains(string(out),
			"tandem_") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return metricsText(out)
}

// sum adds up the samples whose line starts with sample.
func (m metricsText) sum(sample string) float64 {
	total := 0.0
	for _, line := range strings.Split(string(m), "\n") {
		if strings.HasPrefix(line, sample) {
			fields := strings.Fields(line)
			var v float64
			if _, err := fmt.Sscan(fields[len(fields)-1], &v); err == nil {
				total += v
			}
		}
	}
	return total
}

const activeBlocks = `tandem_kv_cache_blocks{state="active"}`

// A client that disconnects frees the KV blocks its request held, on the decode
// worker and on the prefill worker, wherever the request was: streaming tokens
// after a local or a remote prefill, or still waiting for its remote prefill,
// which the disconnect cancels (DESIGN section 3) whether the prefill worker is
// computing the prompt or handing its KV over.
//
// Both workers run the small model, whose prefill of a long prompt takes
// seconds: long enough to see it under way in the prefill worker's metrics and
// cut it. The handoff is held in the middle by the fault proxy in front of the KV
// transfer port: once the decode worker has the header and the first chunk (and
// so holds every block of the import), the proxy passes nothing more from the
// prefill worker, which is left holding its blocks in a blocked send (the KV,
// 10 MB, is more than the 4 MiB stream window); what the decode worker sends,
// its cancel included, still passes.
func TestClientDisconnectFreesBlocks(t *testing.T) {
	pre, kvProxy := kvBehindProxy(t, "--id", "prefill-d", "--model", "small")
	dec := runService(t, "decode", "--listen", "127.0.0.1:0", "--id", "decode-d", "--model", "small", "--prefill-workers", pre.addr,
		"--short-prefill-threshold", "64", "--remote-deadline-min", "60s", "--remote-deadline-max", "90s")
	rtr := startService(t, "router", "--listen", "127.0.0.1:0", "--decode-workers", dec.addr, "--prefill-workers", pre.addr)
	fe := startService(t, "frontend", "--listen", "127.0.0.1:0", "--router", rtr)
	waitHealthy(t, fe)
	warmKVPort(t, fe, pre, 60)

	bothFree := func(what string) {
		t.Helper()
		for _, w := range []*service{dec, pre} {
			testutil.WaitForWithin(t, 20*time.Second, fmt.Sprintf("%s: %s holds no active blocks", what, w.addr), func() bool {
				m := scrape(w.addr)
				return strings.Contains(string(m), activeBlocks) && m.sum(activeBlocks) == 0
			})
		}
	}

	// Streaming tokens: cut after the first few chunks.
	for _, tc := range []struct {
		name, content, path string
	}{
		{"local prefill", "short", "local"},
		{"remote prefill", longPrompt(7, 200), "remote"},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		body := fmt.Sprintf(`{"max_tokens":1000,"stream":true,"messages":[{"role":"user","content":%q}]}`, tc.content)
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+fe+"/v1/chat/completions", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if p := resp.Header.Get("X-Tandem-Prefill-Path"); p != tc.path {
			t.Errorf("%s: prefill path %q, want %s", tc.name, p, tc.path)
		}
		sc := bufio.NewScanner(resp.Body)
		for got := 0; got < 4 && sc.Scan(); {
			if strings.HasPrefix(sc.Text(), "data: ") {
				got++
			}
		}
		if v := scrape(dec.addr).sum(activeBlocks); v == 0 {
			t.Errorf("%s: no active blocks on the decode worker while streaming; the check below would prove nothing", tc.name)
		}
		cancel()
		resp.Body.Close()
		bothFree(tc.name + ", cut while streaming")
	}

	// Still waiting for the remote prefill: cut while the workers show it under
	// way, before the client has had a byte.
	for _, tc := range []struct {
		name    string
		content string
		hold    bool // hold the handoff after its first chunk
		// underWay says, from one scrape of each worker, that the phase to cut is.
		underWay func(pre, dec metricsText) bool
		// outcome is how the prefill worker counts a prefill its client abandoned:
		// as cancelled, not as a failure of its own, in either phase.
		outcome string
	}{
		{
			// About 3500 tokens: seconds of the small model's prefill.
			name: "computing the prompt", content: longPrompt(8, 3000), outcome: "cancelled",
			underWay: func(pre, dec metricsText) bool {
				return pre.sum("tandem_num_requests_running") > 0 && pre.sum(activeBlocks) > 0 && dec.sum(activeBlocks) == 0
			},
		},
		{
			// About 1780 tokens: 111 blocks of 96 KiB.
			name: "handing the KV over", content: longPrompt(9, 1500), outcome: "cancelled", hold: true,
			underWay: func(pre, dec metricsText) bool {
				// The decode worker allocates every block of an import when the
				// header arrives; the prefill worker holds its blocks until the
				// last chunk is sent.
				return pre.sum(activeBlocks) > 0 && dec.sum(activeBlocks) > 0
			},
		},
	} {
		tripped := make(chan struct{})
		if tc.hold {
			kvProxy.tripAfterStreamData(1<<20+4<<10, false, func() { close(tripped) })
		}
		before, decBefore := scrape(pre.addr), scrape(dec.addr)
		ctx, cancel := context.WithCancel(context.Background())
		res := make(chan streamedChat, 1)
		go func() { res <- chatStreamed(ctx, fe, tc.content, 100) }()
		deadline := time.Now().Add(60 * time.Second)
		// In the hold case, both workers hold blocks from the header on, a moment
		// before the first chunk reaches the proxy's hold: wait for the hold too.
		held := func() bool {
			if !tc.hold {
				return true
			}
			select {
			case <-tripped:
				return true
			default:
				return false
			}
		}
		for !held() || !tc.underWay(scrape(pre.addr), scrape(dec.addr)) {
			select {
			case r := <-res:
				t.Fatalf("%s: the request ended before the remote prefill was seen under way: %+v", tc.name, r)
			default:
			}
			if time.Now().After(deadline) {
				cancel()
				t.Fatalf("%s: never saw the remote prefill under way; the client saw %+v", tc.name, <-res)
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		if r := <-res; r.err == nil || r.done || r.status != 0 {
			t.Errorf("%s: the cancelled client saw status %d, [DONE] %v, %q (err %v): the request was not cut before its answer", tc.name, r.status,
				r.done, r.text, r.err)
		}
		bothFree(tc.name)
		testutil.WaitForWithin(t, 10*time.Second, tc.name+": the prefill worker ends the abandoned prefill", func() bool {
			return scrape(pre.addr).sum("tandem_num_requests_running") == 0
		})
		kvProxy.release()
		after, decAfter := scrape(pre.addr), scrape(dec.addr)
		delta := func(sample string) float64 { return after.sum(sample) - before.sum(sample) }
		if d := delta(`tandem_prefill_requests_total{outcome="ok"}`); d != 0 {
			t.Errorf("%s: the prefill worker counted %v prefills sent whole after the client left", tc.name, d)
		}
		if d := delta(fmt.Sprintf(`tandem_prefill_requests_total{outcome=%q}`, tc.outcome)); d != 1 {
			t.Errorf("%s: the prefill worker counted %v prefills %s, want 1 (outcomes in all: %v before, %v after)", tc.name, d, tc.outcome,
				before.sum("tandem_prefill_requests_total{"), after.sum("tandem_prefill_requests_total{"))
		}
		if d := delta("tandem_prefill_compute_seconds_count"); !tc.hold && d != 0 {
			t.Errorf("%s: the prefill worker ran %v prefills to their end after the client left", tc.name, d)
		}
		// A client that left is no failure of the prefill worker: no fallback, and
		// no local prefill for nobody.
		for _, sample := range []string{"tandem_decode_fallbacks_total{", "tandem_prefill_decisions_total{", "tandem_decode_remote_prefill_failures_total{"} {
			if d := decAfter.sum(sample) - decBefore.sum(sample); d != 0 {
				t.Errorf("%s: the decode worker counted %v more %s", tc.name, d, strings.TrimSuffix(sample, "{"))
			}
		}
	}
}
