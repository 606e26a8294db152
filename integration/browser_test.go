package integration

// The console in a real browser: headless Chromium, driven from Go with
// chromedp, against the real `tandem up`. scripts/test.sh installs Debian's
// chromium when it is missing; without one the test says it is skipped.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
)

// chromium is the browser's path: $TANDEM_CHROMIUM, or the first of Debian's and
// Google's names on PATH; "" when there is none.
func chromium() string {
	if p := os.Getenv("TANDEM_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// page is a headless browser tab, what it wrote to its console, and where its
// screenshots go.
type page struct {
	t         *testing.T
	ctx       context.Context
	artifacts string
	mu        sync.Mutex
	problems  []string
	// expected are the browser's own network log entries a test provokes on
	// purpose (a 401 that makes the page ask for a key, a 400 for a bad policy):
	// the URL and status of each.
	expected []string
}

// expect says that the browser will log a failed load of path with status, on
// purpose: it is not a problem.
func (p *page) expect(path string, status int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expected = append(p.expected, fmt.Sprintf("%d|%s", status, path))
}

// newPage starts a headless Chromium, or skips the test when there is none.
func newPage(t *testing.T) *page {
	t.Helper()
	path := chromium()
	if path == "" {
		t.Skip("SKIPPED: no Chromium to drive (apt-get install -y chromium, or set TANDEM_CHROMIUM); scripts/test.sh installs it")
	}
	dir := os.Getenv("TANDEM_ARTIFACTS")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "tandem-artifacts-"); err != nil {
			t.Fatal(err)
		}
	}
	dir = filepath.Join(dir, t.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots of %s go to %s", t.Name(), dir)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.WindowSize(1600, 1250),
		chromedp.Flag("disable-gpu", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 3*time.Minute)
	p := &page{t: t, ctx: ctx, artifacts: dir}
	t.Cleanup(func() {
		cancelTime()
		cancelTab()
		cancelAlloc()
	})
	// Everything the page writes to its console that is a warning or worse is a
	// problem: an exception, a failed load, a refused script.
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.IsException() {
				p.mu.Lock()
				if !p.isExpected(m) {
					p.problems = append(p.problems, m.String()+" at "+m.URL)
				}
				p.mu.Unlock()
			}
		}
	}()
	return p
}

// isExpected reports whether m is a failed load the test provoked; p.mu is held.
func (p *page) isExpected(m chromedp.ConsoleMessage) bool {
	if m.Source != "network" {
		return false
	}
	for _, e := range p.expected {
		status, path, _ := strings.Cut(e, "|")
		if strings.HasSuffix(m.URL, path) && strings.Contains(m.Text, "status of "+status) {
			return true
		}
	}
	return false
}

func (p *page) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, steps...); err != nil {
		p.screenshot("failed")
		p.t.Fatalf("%s: %v", what, err)
	}
}

// waitFor polls a JavaScript predicate until it holds, failing after limit.
func (p *page) waitFor(what, predicate string, limit time.Duration) {
	p.t.Helper()
	poll := chromedp.Poll[bool](predicate, chromedp.WithPollingTimeout(limit), chromedp.WithPollingInterval(50*time.Millisecond))
	if _, err := chromedp.Run(p.ctx, poll); err != nil {
		p.screenshot("failed")
		p.t.Fatalf("waiting %s for %s: %v", limit, what, err)
	}
}

func eval[T any](p *page, expr string) T {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// screenshot saves the whole page as name.png among the test's artifacts.
func (p *page) screenshot(name string) {
	p.t.Helper()
	// From the top: the sticky header and chat are drawn where the view is.
	if _, err := chromedp.Run(p.ctx, chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`)); err != nil {
		p.t.Errorf("scrolling to the top: %v", err)
	}
	b, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(p.artifacts, name+".png")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		p.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	p.t.Logf("screenshot: %s", path)
}

func (p *page) noProblems(when string) {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.problems {
		p.t.Errorf("browser console %s: %s", when, m)
	}
	p.problems = nil
}

// fleetRow is a row of the page's fleet table.
type fleetRow struct {
	ID    string `json:"id"`
	State string `json:"state"`
	KV    string `json:"kv"`
	Mode  string `json:"mode"`
}

const readFleet = `[...document.querySelectorAll('#fleet-body tr[data-worker]')].map(tr => ({
	id: tr.dataset.worker, state: tr.dataset.state, kv: tr.querySelector('td.kv').textContent, mode: tr.querySelector('.pill.mode').textContent}))`

// A user opens the console of `tandem up` (the embedded stories260K, two decode
// workers and a prefill worker): the page loads clean, lists the router's workers
// with their KV caches, streams a chat reply with its prefill path, and shows a
// worker drained with tandem drain within moments.
func TestConsoleInBrowser(t *testing.T) {
	p := newPage(t)
	proc, url := startUpWith(t, nil, "--decode", "2", "--prefill", "1")
	rc, _ := dialRouter(t, proc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	listed, err := rc.ListWorkers(ctx, &routerv1.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	n := len(listed.GetWorkers())

	// 1. The page loads, connects, and lists the fleet with KV usage.
	p.do("opening the console", chromedp.Navigate(url+"/"))
	p.waitFor("the live stream", `document.getElementById('conn-text').textContent === 'live'`, 20*time.Second)
	p.waitFor("every worker with a KV report", fmt.Sprintf(`document.querySelectorAll('#fleet-body td[data-used] .kvbar').length === %d`, n), 20*time.Second)
	rows := eval[[]fleetRow](p, readFleet)
	for i, w := range listed.GetWorkers() {
		mode := strings.ToLower(strings.TrimPrefix(w.GetMode().String(), "WORKER_MODE_"))
		if i >= len(rows) || rows[i].ID != w.GetId() || rows[i].State != "serving" || rows[i].Mode != mode {
			t.Errorf("fleet row %d: %+v; the router lists %s (%s)", i, rows, w.GetId(), mode)
			continue
		}
		// "0% · 0 / 6,553": usage and the pool in blocks.
		if kv := rows[i].KV; !strings.Contains(kv, "%") || !strings.Contains(kv, " / ") {
			t.Errorf("%s's KV cell %q shows no usage", w.GetId(), kv)
		}
	}
	if model := eval[string](p, `document.getElementById('model').textContent`); model != "stories260K" {
		t.Errorf("header shows model %q, want stories260K", model)
	}
	p.screenshot("1-fleet")
	p.noProblems("after loading")

	// 2. A chat from the page streams its reply and shows its prefill path.
	p.do("sending a chat",
		chromedp.SetValue(chromedp.CSS("#chat-input"), "Once upon a time, a little fox found a red ball in the park."),
		chromedp.Click(chromedp.CSS("#chat-send")))
	p.waitFor("the reply to finish", `document.querySelector('.msg.assistant[data-done]') !== null`, time.Minute)
	type reply struct {
		Done   string `json:"done"`
		Chunks string `json:"chunks"`
		Path   string `json:"path"`
		Text   string `json:"text"`
		Meta   string `json:"meta"`
	}
	r := eval[reply](p, `(() => { const m = document.querySelector('.msg.assistant');
		return {done: m.dataset.done, chunks: m.dataset.chunks || '0', path: m.dataset.path || '', text: m.querySelector('.bubble').textContent,
			meta: (m.querySelector('.meta') || {}).textContent || ''}; })()`)
	if r.Done != "true" || strings.TrimSpace(r.Text) == "" {
		t.Fatalf("chat reply %+v: want text", r)
	}
	var chunks int
	fmt.Sscan(r.Chunks, &chunks)
	if chunks < 2 {
		t.Errorf("the reply came in %d pieces; want it streamed", chunks)
	}
	if !slices.Contains([]string{"local", "remote", "fallback"}, r.Path) || !strings.Contains(strings.ToLower(r.Meta), r.Path) ||
		!strings.Contains(r.Meta, "TTFT") || !strings.Contains(r.Meta, "cached") {
		t.Errorf("reply meta %q with path %q: want the prefill path, TTFT and cached tokens", r.Meta, r.Path)
	}
	// The same request shows among the decisions, from the events stream.
	p.waitFor("the request in the recent requests", `document.querySelectorAll('#requests-body tr[data-request]').length === 1`, 10*time.Second)
	p.waitFor("the decision counted",
		`['n-local', 'n-remote', 'n-fallback'].map(id => Number(document.getElementById(id).textContent)).reduce((a, b) => a + b) === 1`, 10*time.Second)

	// A follow-up turn reuses the conversation's prefix, cached where the first
	// ran. (Once that worker's load report says its request is over: until then
	// the router counts the blocks the request held against it. Reports come with
	// KV events, which the request's own blocks made, and a heartbeat a second
	// apart; one with the request's blocks cached and nothing running is after it.)
	p.waitFor("the router's report of the first request over", `[...document.querySelectorAll('#fleet-body tr[data-worker]')].some(tr =>
		tr.dataset.routed === '1' && Number(tr.dataset.cached) > 0 && tr.dataset.running === '0' &&
		tr.querySelector('td[data-used]').dataset.used === '0')`, 10*time.Second)
	p.do("sending a follow-up", chromedp.SetValue(chromedp.CSS("#chat-input"), "What did the fox do next?"), chromedp.Click(chromedp.CSS("#chat-send")))
	p.waitFor("the second reply", `document.querySelectorAll('.msg.assistant[data-done]').length === 2`, time.Minute)
	second := eval[string](p, `document.querySelectorAll('.msg.assistant')[1].querySelector('.meta').textContent`)
	var cached, prompt int
	if i := strings.Index(second, "cached "); i < 0 {
		t.Errorf("second reply's meta %q says nothing cached", second)
	} else if _, err := fmt.Sscanf(second[i:], "cached %d / %d", &cached, &prompt); err != nil || cached < 16 || cached >= prompt {
		t.Errorf("second reply's meta %q: want part of its prompt cached (%v)", second, err)
	}
	p.waitFor("both requests in the recent requests", `document.querySelectorAll('#requests-body tr[data-request]').length === 2`, 10*time.Second)
	p.screenshot("2-chat")
	p.noProblems("after the chat")

	// 3. tandem drain: the page shows the worker draining within moments.
	var drained *routerv1.Worker
	for _, w := range listed.GetWorkers() {
		if w.GetMode().String() == "WORKER_MODE_DECODE" {
			drained = w
		}
	}
	start := time.Now()
	if out, err := exec.Command(tandemBin, "drain", drained.GetAddress()).CombinedOutput(); err != nil {
		t.Fatalf("tandem drain: %v %s", err, out)
	}
	p.waitFor(drained.GetId()+" draining", fmt.Sprintf(`document.querySelector('#fleet-body tr[data-worker=%q]')?.dataset.state === 'draining'`, drained.GetId()),
		5*time.Second)
	t.Logf("the page showed %s draining %s after tandem drain started", drained.GetId(), time.Since(start).Round(time.Millisecond))
	p.screenshot("3-drained")
	p.noProblems("after the drain")
}

// With --api-keys-file the page shows nothing until it is given a key: it asks,
// and with the key it shows the fleet.
func TestConsoleInBrowserAsksForAKey(t *testing.T) {
	p := newPage(t)
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte("sk-browser\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, url := startUp(t, "--api-keys-file", keys)
	p.expect("/console/events", 401) // the answer that makes the page ask
	p.do("opening the console", chromedp.Navigate(url+"/"))
	p.waitFor("the key dialog", `document.getElementById('key-dialog').open`, 20*time.Second)
	if rows := eval[int](p, `document.querySelectorAll('#fleet-body tr[data-worker]').length`); rows != 0 {
		t.Errorf("without a key the page shows %d workers", rows)
	}
	p.screenshot("1-asks-for-key")
	p.do("giving the key",
		chromedp.SetValue(chromedp.CSS("#key-input"), "sk-browser"),
		chromedp.Click(chromedp.CSS("#key-form button[type=submit]")))
	p.waitFor("the fleet", `document.querySelectorAll('#fleet-body tr[data-worker]').length === 2`, 20*time.Second)
	p.screenshot("2-with-key")
	p.noProblems("with the key")
}

// With Consul, the page's policy form changes the decode workers' threshold: a
// value the services would refuse is refused with their words, a good one shows
// as the policy in force once the workers apply it.
func TestConsolePolicyFormInBrowser(t *testing.T) {
	p := newPage(t)
	a := startConsul(t)
	consulFlags := []string{"--consul", a.Addr, "--check-interval", "500ms", "--check-timeout", "400ms"}
	with := func(args ...string) []string { return append(args, consulFlags...) }
	runService(t, with("prefill", "--listen", "127.0.0.1:0", "--id", "prefill-f")...)
	runService(t, with("decode", "--listen", "127.0.0.1:0", "--id", "decode-f")...)
	runService(t, with("router", "--listen", "127.0.0.1:0")...)
	fe := runService(t, with("frontend", "--listen", "127.0.0.1:0")...)
	waitHealthy(t, fe.addr)

	p.do("opening the console", chromedp.Navigate("http://"+fe.addr+"/"))
	p.waitFor("the decode worker's policy", `document.getElementById('decode-policy').textContent.includes('128')`, 30*time.Second)
	p.do("opening the form", chromedp.Click(chromedp.CSS("#policy-edit")))
	p.waitFor("the form filled in", `document.querySelector('#policy-form [name=short_prefill_threshold]').value === '128'`, 5*time.Second)

	p.expect("/console/policy", 400)
	p.do("a negative threshold",
		chromedp.SetValue(chromedp.CSS("#policy-form [name=short_prefill_threshold]"), "-5"),
		chromedp.Click(chromedp.CSS(`#policy-form button[data-target=decode]`)))
	p.waitFor("the refusal", `document.getElementById('policy-result').className.includes('bad')`, 10*time.Second)
	if msg := eval[string](p, `document.getElementById('policy-result').textContent`); !strings.Contains(msg, "short_prefill_threshold") {
		t.Errorf("the refusal says %q; want the field named", msg)
	}
	p.do("a good threshold",
		chromedp.SetValue(chromedp.CSS("#policy-form [name=short_prefill_threshold]"), "64"),
		chromedp.Click(chromedp.CSS(`#policy-form button[data-target=decode]`)))
	p.waitFor("the write", `document.getElementById('policy-result').className.includes('ok')`, 10*time.Second)
	p.waitFor("the new threshold in force", `document.getElementById('decode-policy').textContent.includes('64')`, 15*time.Second)
	p.screenshot("policy-form")
	p.noProblems("after changing the policy")
}
