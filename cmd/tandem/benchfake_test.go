package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The test binary also stands in for tandem itself. With benchTestMain set it runs
// main, so that a test sees the real exit status; with benchTestFakeTandem set it
// plays the service its first argument names for bench compare, as
// bench/cluster's tests do: it logs where it listens as tandem does, the frontend
// serves fakeOpenAI, and it exits on SIGTERM. (bench/cluster strips TANDEM_*
// variables from the children's environment, so these names must not start so.)
const (
	benchTestMain       = "BENCHTEST_RUN_MAIN"
	benchTestFakeTandem = "BENCHTEST_FAKE_TANDEM"
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(benchTestMain) != "":
		main()
		os.Exit(0)
	case os.Getenv(benchTestFakeTandem) != "":
		fakeTandem(os.Args[1:])
		return
	}
	os.Exit(m.Run())
}

func fakeTandem(args []string) {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.Exit(3)
	}
	if args[0] == "frontend" {
		go http.Serve(ln, newFakeOpenAI())
	}
	fmt.Fprintf(os.Stderr, `{"level":"INFO","msg":"%s listening","addr":%q}`+"\n", args[0], ln.Addr().String())
	<-stop
	os.Exit(0)
}

// fakeOpenAI is a small OpenAI-compatible server. It streams max_tokens content
// chunks ("tok "), then a usage chunk when stream_options.include_usage asks for
// one, then [DONE]. What it does depends on max_tokens, so that each class of a
// mixed workload gets its own behaviour:
//
//	3: x-tandem-prefill-path: local
//	4: x-tandem-prefill-path: remote
//	5: no header; the first chunk says "tandem":{"prefill_path":"fallback"}
//	6: 503 with an OpenAI error, before any stream
//	7: like 3, but waits 60ms before its first chunk
//	8: reports every prompt token cached once this process has completed 3
//	   streams of 8 (a prefix cache the earlier requests warmed), none before
//
// It reports prompt_tokens as 100+max_tokens. It counts what it sent.
type fakeOpenAI struct {
	mu       sync.Mutex
	requests int            // generation requests, streamed or not
	noUsage  int            // streamed requests that did not ask for usage
	models   map[string]int // the "model" field of each request
	paths    map[string]int // completed streams by the prefill path they were given
	byMax    map[int]int    // completed streams by max_tokens
	endpoint map[string]int // requests by URL path
}

func newFakeOpenAI() *fakeOpenAI {
	return &fakeOpenAI{models: map[string]int{}, paths: map[string]int{}, byMax: map[int]int{}, endpoint: map[string]int{}}
}

func (f *fakeOpenAI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/v1/models" {
		io.WriteString(w, `{"object":"list","data":[{"id":"fake-model","object":"model"},{"id":"other","object":"model"}]}`)
		return
	}
	chat := r.URL.Path == "/v1/chat/completions"
	if r.Method != http.MethodPost || !chat && r.URL.Path != "/v1/completions" {
		http.NotFound(w, r)
		return
	}
	var req struct {
		Model         string `json:"model"`
		MaxTokens     int    `json:"max_tokens"`
		Stream        bool   `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"error":{"message":"bad body","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.requests++
	f.models[req.Model]++
	f.endpoint[r.URL.Path]++
	if req.Stream && !req.StreamOptions.IncludeUsage {
		f.noUsage++
	}
	f.mu.Unlock()
	if !req.Stream { // bench/cluster's readiness probe
		io.WriteString(w, `{"object":"text_completion","choices":[{"index":0,"text":"x","finish_reason":"length"}]}`)
		return
	}
	if req.MaxTokens == 6 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":{"message":"overloaded","type":"server_error"}}`)
		return
	}
	path := map[int]string{3: "local", 4: "remote", 7: "local"}[req.MaxTokens]
	if path != "" {
		w.Header().Set("x-tandem-prefill-path", path)
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	if req.MaxTokens == 7 {
		time.Sleep(60 * time.Millisecond)
	}
	send := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		fl.Flush()
	}
	for i := range max(req.MaxTokens, 1) {
		choice := map[string]any{"index": 0, "text": "tok ", "finish_reason": nil}
		obj := "text_completion"
		if chat {
			choice = map[string]any{"index": 0, "delta": map[string]any{"content": "tok "}, "finish_reason": nil}
			obj = "chat.completion.chunk"
		}
		ev := map[string]any{"id": "cmpl-1", "object": obj, "model": req.Model, "choices": []any{choice}}
		if i == 0 && req.MaxTokens == 5 {
			ev["tandem"] = map[string]any{"prefill_path": "fallback"}
		}
		send(ev)
		time.Sleep(time.Millisecond) // gaps between chunks, so ITLs are not all zero
	}
	if req.StreamOptions.IncludeUsage {
		usage := map[string]any{"prompt_tokens": 100 + req.MaxTokens, "completion_tokens": req.MaxTokens, "total_tokens": 100 + 2*req.MaxTokens}
		if req.MaxTokens == 8 {
			f.mu.Lock()
			warm := f.byMax[8] >= 3
			f.mu.Unlock()
			if warm {
				usage["prompt_tokens_details"] = map[string]any{"cached_tokens": 100 + req.MaxTokens}
			} else {
				usage["prompt_tokens_details"] = map[string]any{"cached_tokens": 0}
			}
		}
		send(map[string]any{"id": "cmpl-1", "object": "chat.completion.chunk", "choices": []any{}, "usage": usage})
	}
	io.WriteString(w, "data: [DONE]\n\n")
	fl.Flush()
	if path == "" && req.MaxTokens == 5 {
		path = "fallback"
	}
	f.mu.Lock()
	f.paths[path]++
	f.byMax[req.MaxTokens]++
	f.mu.Unlock()
}

func (f *fakeOpenAI) snapshot() (requests, noUsage int, models, paths map[string]int, byMax map[int]int, endpoint map[string]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cp := func(m map[string]int) map[string]int {
		c := map[string]int{}
		for k, v := range m {
			c[k] = v
		}
		return c
	}
	bm := map[int]int{}
	for k, v := range f.byMax {
		bm[k] = v
	}
	return f.requests, f.noUsage, cp(f.models), cp(f.paths), bm, cp(f.endpoint)
}

func startFake(t *testing.T) (*fakeOpenAI, string) {
	t.Helper()
	f := newFakeOpenAI()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

// benchOut is the part of the JSON file the tests read.
type benchOut struct {
	Command []string `json:"command"`
	Runs    []struct {
		Label       string          `json:"label"`
		Group       string          `json:"group"`
		Workload    string          `json:"workload"`
		Seed        uint64          `json:"seed"`
		Concurrency int             `json:"concurrency"`
		Rate        float64         `json:"rate"`
		SLO         string          `json:"slo"`
		Overall     summaryOut      `json:"overall"`
		Classes     []summaryOut    `json:"classes"`
		Requests    json.RawMessage `json:"requests"`
	} `json:"runs"`
}

type summaryOut struct {
	Class        string          `json:"class"`
	Requests     int             `json:"requests"`
	Completed    int             `json:"completed"`
	Failed       int             `json:"failed"`
	Aborted      int             `json:"aborted"`
	DurationS    float64         `json:"duration_s"`
	InputTokens  int             `json:"input_tokens"`
	OutputTokens int             `json:"output_tokens"`
	CacheHitRate float64         `json:"cache_hit_rate"`
	GoodRequests *int            `json:"good_requests"`
	Goodput      *float64        `json:"goodput"`
	TTFT         struct{ N int } `json:"ttft"`
	ITL          struct{ N int } `json:"itl"`
	PrefillPaths map[string]int  `json:"prefill_paths"`
	Errors       map[string]int  `json:"errors"`
}

func readBenchJSON(t *testing.T, path string) benchOut {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the --json file: %v", err)
	}
	var out benchOut
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("the --json file is not JSON: %v\n%s", err, b)
	}
	return out
}

func runTandem(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = run(ctx, args, func(string) string { return "" }, &o, &e)
	return o.String(), e.String(), err
}

func checkNoProgressBar(t *testing.T, stderr string) {
	t.Helper()
	if strings.Contains(stderr, "\r") || strings.Contains(stderr, "in flight") {
		t.Errorf("a progress bar was drawn on stderr, which is not a terminal:\n%q", stderr)
	}
}

func checkPNGs(t *testing.T, dir string, want ...string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.png"))
	if len(files) == 0 {
		t.Fatalf("no PNG written to %s", dir)
	}
	for _, w := range want {
		if _, err := os.Stat(filepath.Join(dir, w)); err != nil {
			t.Errorf("chart %s not written: %v", w, err)
		}
	}
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(r)
		r.Close()
		if err != nil {
			t.Errorf("%s is not a PNG: %v", f, err)
			continue
		}
		if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
			t.Errorf("%s is %v, too small to be a chart", f, b)
		}
	}
}
