package enginereplay_test

import (
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/openaihttp"
	"github.com/tandem-serve/tandem/engine/sglang"
	"github.com/tandem-serve/tandem/engine/trtllm"
	"github.com/tandem-serve/tandem/engine/vllm"
	"github.com/tandem-serve/tandem/internal/testutil"
	"github.com/tandem-serve/tandem/internal/testutil/enginereplay"
	"github.com/tandem-serve/tandem/internal/testutil/fakeengine"
	"github.com/tandem-serve/tandem/tokenizer"
)

var update = flag.Bool("update", false, "capture testdata/fakeengine-*.jsonl again from internal/fakeengine")

// seen is what a worker's engine adapter made of the server: what its clients
// would get.
type seen struct {
	Model         string
	ContextLength int
	Mode          openaihttp.TokenMode
	Running       int
	Tokens        []uint32
	Finish        engine.FinishReason
	Usage         engine.Usage
	Params        string // the prefill leg's transfer parameters
	DecodeTokens  []uint32
}

func dialect(k fakeengine.Kind) openaihttp.Dialect {
	switch k {
	case fakeengine.TRTLLM:
		return trtllm.Dialect()
	case fakeengine.SGLang:
		return sglang.Dialect(sglang.Bootstrap{Host: "127.0.0.1", Port: 8998})
	}
	return vllm.Dialect()
}

// scenario starts the adapter against url, as a worker does, generates once,
// and runs both legs of the engine's disaggregation.
func scenario(t *testing.T, url string, d openaihttp.Dialect, hc *http.Client) seen {
	t.Helper()
	tok, err := tokenizer.CL100K()
	if err != nil {
		t.Fatal(err)
	}
	e, err := openaihttp.New(t.Context(), openaihttp.Config{URL: url, Dialect: d, Tokenizer: tok, BlockSize: 16,
		ContextLength: 4096, MetricsInterval: time.Hour, HTTP: hc})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	// The first scrape runs at start; the capture must hold it.
	for deadline := time.Now().Add(10 * time.Second); e.Stats().Running == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no load scraped")
		}
	}
	info := e.Info()
	out := seen{Model: info.Model, ContextLength: info.ContextLength, Mode: e.TokenMode(), Running: e.Stats().Running}
	prompt := []uint32{9906, 11, 1917, 0, 358, 1097, 264, 1296}
	s, err := e.Generate(t.Context(), engine.Request{ID: "req-local", Prompt: prompt, MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	out.Tokens = testutil.Drain(t, t.Context(), s)
	out.Finish, out.Usage = s.Finish(), s.Usage()

	req := engine.Request{ID: "req-remote", Prompt: prompt, MaxTokens: 3}
	x, err := e.ExportRef(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	if d.Name == "sglang" {
		out.Params = "(random bootstrap room)" // tandem's own, different every run
	} else {
		out.Params = string(x.Params())
	}
	ds, err := e.ImportRef(t.Context(), req, x.Params())
	if err != nil {
		t.Fatal(err)
	}
	out.DecodeTokens = testutil.Drain(t, t.Context(), ds)
	if err := x.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	return out
}

type capture struct {
	name string
	srv  *fakeengine.Server
}

func fakes() []capture {
	return []capture{
		{"fakeengine-vllm", &fakeengine.Server{Kind: fakeengine.VLLM, TokenIDs: true, Running: 2, TotalBlocks: 900}},
		{"fakeengine-vllm-text", &fakeengine.Server{Kind: fakeengine.VLLM, Running: 1}},
		{"fakeengine-trtllm", &fakeengine.Server{Kind: fakeengine.TRTLLM, TokenIDs: true, Running: 3, TotalBlocks: 700}},
		{"fakeengine-sglang", &fakeengine.Server{Kind: fakeengine.SGLang, TokenIDs: true, Running: 4}},
	}
}

// Recording changes nothing the client sees, and the replay of the recording
// gives the client exactly what the live server gave, request for request.
func TestRecordThenReplay(t *testing.T) {
	for _, c := range fakes() {
		t.Run(c.name, func(t *testing.T) {
			f := c.srv.Start(t)
			d := dialect(f.Kind)
			plain := scenario(t, f.URL(), d, nil)
			rec, err := openaihttp.NewRecorder(t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			recorded := scenario(t, f.URL(), d, &http.Client{Transport: rec})
			if err := rec.Close(); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(plain, recorded) {
				t.Fatalf("recording changed what the client saw:\n%+v\n%+v", plain, recorded)
			}
			xs, err := enginereplay.Load(rec.Path())
			if err != nil {
				t.Fatal(err)
			}
			r := enginereplay.Start(t, xs)
			replayed := scenario(t, r.URL(), d, nil)
			if !reflect.DeepEqual(plain, replayed) {
				t.Errorf("the replay differs:\nlive   %+v\nreplay %+v", plain, replayed)
			}
			if m := r.Misses(); len(m) > 0 {
				t.Errorf("requests the capture did not hold: %q", m)
			}
			if *update {
				b, err := os.ReadFile(rec.Path())
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join("testdata", c.name+".jsonl"), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// The committed captures, served back: what the adapter makes of each engine's
// answers, pinned.
func TestCommittedFakeCaptures(t *testing.T) {
	want := map[string]seen{
		"fakeengine-vllm": {Mode: openaihttp.TokenIDs, Running: 2, Tokens: []uint32{11, 12, 13, 14}, DecodeTokens: []uint32{11, 12, 13},
			Params: `{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[[7,8,9]],"remote_engine_id":"fake-prefill-engine",` +
				`"remote_request_id":"req-remote","remote_host":"10.0.0.7","remote_port":5600,"tp_size":1}`},
		"fakeengine-vllm-text": {Mode: openaihttp.TextTokens, Running: 1},
		"fakeengine-trtllm": {Mode: openaihttp.TokenIDs, Running: 3, Tokens: []uint32{11, 12, 13, 14}, DecodeTokens: []uint32{11, 12, 13},
			Params: `{"request_type":"context_only","first_gen_tokens":[11],"ctx_request_id":4242,"encoded_opaque_state":"b3BhcXVlLXN0YXRl",` +
				`"draft_tokens":null,"disagg_request_id":99}`},
		"fakeengine-sglang": {Mode: openaihttp.TokenIDs, Running: 4, Tokens: []uint32{11, 12, 13, 14}, DecodeTokens: []uint32{11, 12, 13},
			Params: "(random bootstrap room)"},
	}
	for _, c := range fakes() {
		t.Run(c.name, func(t *testing.T) {
			xs, err := enginereplay.Load(filepath.Join("testdata", c.name+".jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			r := enginereplay.Start(t, xs)
			got := scenario(t, r.URL(), dialect(c.srv.Kind), nil)
			w := want[c.name]
			if got.Model != "fake-model" || got.ContextLength != 4096 || got.Mode != w.Mode || got.Running != w.Running ||
				got.Finish != engine.FinishLength || got.Usage.PromptTokens != 8 || got.Usage.CompletionTokens != 4 {
				t.Errorf("got %+v", got)
			}
			if w.Tokens != nil && (!reflect.DeepEqual(got.Tokens, w.Tokens) || !reflect.DeepEqual(got.DecodeTokens, w.DecodeTokens) ||
				got.Params != w.Params) {
				t.Errorf("tokens %v, decode leg %v, params %s; want %v, %v, %s", got.Tokens, got.DecodeTokens, got.Params, w.Tokens, w.DecodeTokens, w.Params)
			}
			if w.Mode == openaihttp.TextTokens && len(got.Tokens) != 4 {
				t.Errorf("text mode: %d tokens, want 4", len(got.Tokens))
			}
			if m := r.Misses(); len(m) > 0 {
				t.Errorf("requests the capture did not hold: %q", m)
			}
		})
	}
}

// A request the capture does not hold is answered 404 and reported, rather than
// served something else.
func TestReplayMiss(t *testing.T) {
	xs, err := enginereplay.Load(filepath.Join("testdata", "fakeengine-vllm.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	r := enginereplay.Start(t, xs)
	resp, err := http.Post(r.URL()+"/v1/completions", "application/json", strings.NewReader(`{"model":"other","prompt":[1]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || len(r.Misses()) != 1 || !strings.Contains(r.Misses()[0], `"model":"other"`) {
		t.Errorf("status %d, misses %q", resp.StatusCode, r.Misses())
	}
}
