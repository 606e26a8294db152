package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/internal/testutil/fakeengine"
)

// The GPU engine adapters, driven through the whole suite with no GPU: each
// engine server is a fake built from its documented protocol
// (internal/testutil/fakeengine), and every request goes client -> frontend -> router ->
// tandem decode worker -> fake engine, with a tandem prefill worker in front of
// another fake for the remote path.

// gpuTokenizer is the workers' --tokenizer: GPT-2's vocabulary (llama.cpp's
// ggml-vocab-gpt-2.gguf), which the fakes' token ids fall in.
const gpuTokenizer = "../tokenizer/testdata/ggml-vocab-gpt-2.gguf"

// gpuCluster is one engine kind behind tandem: a prefill and a decode worker,
// each in front of its fake, a router and a frontend.
type gpuCluster struct {
	kind              fakeengine.Kind
	p, d              *fakeengine.Server
	pre, dec, rtr, fe string
}

// gpuWorker starts a tandem worker of mode in front of f.
func gpuWorker(t *testing.T, mode, id string, f *fakeengine.Server, extra ...string) string {
	t.Helper()
	args := []string{mode, "--listen", "127.0.0.1:0", "--id", id, "--engine", string(f.Kind), "--engine-url", f.URL(),
		"--tokenizer", gpuTokenizer, "--model", "fake-model", "--engine-metrics-interval", "100ms", "--engine-wait", "30s"}
	if f.Kind == fakeengine.TRTLLM {
		args = append(args, "--max-model-len", "4096") // trtllm-serve reports none
	}
	return startService(t, append(args, extra...)...)
}

func startGPUCluster(t *testing.T, kind fakeengine.Kind, decodeArgs ...string) *gpuCluster {
	t.Helper()
	return startGPUClusterWith(t, kind, nil, decodeArgs)
}

// startGPUClusterWith is startGPUCluster with flags for the prefill worker too.
func startGPUClusterWith(t *testing.T, kind fakeengine.Kind, preArgs, decodeArgs []string) *gpuCluster {
	t.Helper()
	c := &gpuCluster{kind: kind}
	c.p = (&fakeengine.Server{Kind: kind, TokenIDs: true}).Start(t)
	c.d = (&fakeengine.Server{Kind: kind, TokenIDs: true, TokenDelay: 20 * time.Millisecond}).Start(t)
	if kind == fakeengine.SGLang {
		preArgs = append([]string{"--engine-bootstrap", "10.1.2.3:8998"}, preArgs...)
	}
	c.pre = gpuWorker(t, "prefill", "prefill-g", c.p, preArgs...)
	c.dec = gpuWorker(t, "decode", "decode-g", c.d, append([]string{"--prefill-workers", c.pre, "--short-prefill-threshold", "32"},
		decodeArgs...)...)
	c.rtr = startService(t, "router", "--listen", "127.0.0.1:0", "--decode-workers", c.dec, "--prefill-workers", c.pre)
	c.fe = startService(t, "frontend", "--listen", "127.0.0.1:0", "--router", c.rtr)
	waitHealthy(t, c.fe)
	return c
}

// completion is a non-streamed /v1/completions answer.
type completion struct {
	Choices []struct {
		Text string `json:"text"`
	} `json:"choices"`
	Usage struct {
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Tandem struct {
		PrefillPath   string `json:"prefill_path"`
		PrefillReason string `json:"prefill_reason"`
		PrefillWorker string `json:"prefill_worker"`
		DecodeWorker  string `json:"decode_worker"`
	} `json:"tandem"`
}

// complete posts prompt (text or token ids) for 4 tokens, greedy and seeded, and
// returns the answer and its request id.
func complete(t *testing.T, fe string, prompt any) (completion, string) {
	t.Helper()
	p, _ := json.Marshal(prompt)
	body := fmt.Sprintf(`{"model":"fake-model","prompt":%s,"max_tokens":4,"temperature":0,"seed":5}`, p)
	resp, err := http.Post("http://"+fe+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out completion
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d: %v", resp.StatusCode, err)
	}
	return out, resp.Header.Get("x-request-id")
}

// gpuLongPrompt is well over the decode workers' 32-token threshold.
var gpuLongPrompt = strings.Repeat("The quick brown fox jumps over the lazy dog. ", 8)

// promptOf is the token ids a recorded engine request carried.
func promptOf(t *testing.T, r fakeengine.Request) []uint32 {
	t.Helper()
	var b struct {
		Prompt []uint32 `json:"prompt"`
	}
	if err := json.Unmarshal(r.Body, &b); err != nil || len(b.Prompt) == 0 {
		t.Fatalf("no token ids in %s: %v", r.Body, err)
	}
	return b.Prompt
}

// wantBody is the body an engine must have been sent, with its prompt.
func wantBody(t *testing.T, r fakeengine.Request, format string) string {
	t.Helper()
	p, _ := json.Marshal(promptOf(t, r))
	return fmt.Sprintf(format, p)
}

func jsonSame(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

func rawField(obj []byte, key string) json.RawMessage {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(obj, &m)
	return m[key]
}

// vLLM: a short prompt is prefilled on the decode worker's engine with exactly
// the documented body (token ids in, return_token_ids); a long one on the prefill
// worker's engine with the NixlConnector's prefill leg, whose kv_transfer_params
// reach the decode engine verbatim, under the same X-Request-Id.
func TestGPUvLLMLocalAndRemote(t *testing.T) {
	c := startGPUCluster(t, fakeengine.VLLM)
	out, _ := complete(t, c.fe, "Hi there")
	if out.Tandem.PrefillPath != "local" || out.Tandem.DecodeWorker != "decode-g" || out.Usage.CompletionTokens != 4 {
		t.Fatalf("short prompt: %+v", out)
	}
	reqs := c.d.Completions()
	if len(reqs) != 1 {
		t.Fatalf("decode engine got %d requests", len(reqs))
	}
	// GPT-2's end of text is the stop token the frontend asks for.
	want := wantBody(t, reqs[0], `{"model":"fake-model","prompt":%s,"max_tokens":4,"temperature":0,"seed":5,"stream":true,`+
		`"stream_options":{"include_usage":true},"stop_token_ids":[50256],"return_token_ids":true}`)
	if string(reqs[0].Body) != want {
		t.Errorf("local body\n%s\nwant\n%s", reqs[0].Body, want)
	}

	out, rid := complete(t, c.fe, gpuLongPrompt)
	if out.Tandem.PrefillPath != "remote" || out.Tandem.PrefillWorker != "prefill-g" || out.Usage.CompletionTokens != 4 {
		t.Fatalf("long prompt: %+v", out)
	}
	pre, dec := c.p.Completions(), c.d.Completions()[1:]
	if len(pre) != 1 || len(dec) != 1 {
		t.Fatalf("prefill engine got %d requests, decode engine %d more", len(pre), len(dec))
	}
	want = wantBody(t, pre[0], `{"model":"fake-model","prompt":%s,"max_tokens":1,"temperature":0,"seed":5,"stream":false,`+
		`"stop_token_ids":[50256],"return_token_ids":true,"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,`+
		`"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}}`)
	if string(pre[0].Body) != want {
		t.Errorf("prefill leg\n%s\nwant\n%s", pre[0].Body, want)
	}
	params, _ := json.Marshal(fakeengine.VLLMParams{DoRemotePrefill: true, RemoteBlockIDs: [][]int64{{7, 8, 9}},
		RemoteEngineID: "fake-prefill-engine", RemoteRequestID: pre[0].RequestID, RemoteHost: "10.0.0.7", RemotePort: 5600, TPSize: 1})
	if got := rawField(dec[0].Body, "kv_transfer_params"); !jsonSame(got, params) {
		t.Errorf("decode leg's kv_transfer_params %s, want the prefill leg's %s", got, params)
	}
	if pre[0].RequestID == "" || pre[0].RequestID != dec[0].RequestID || pre[0].RequestID != rid {
		t.Errorf("X-Request-Id: prefill leg %q, decode leg %q, client's %q", pre[0].RequestID, dec[0].RequestID, rid)
	}
	if !jsonSame(rawField(dec[0].Body, "prompt"), rawField(pre[0].Body, "prompt")) || string(rawField(dec[0].Body, "stream")) != "true" {
		t.Errorf("decode leg %s", dec[0].Body)
	}

	// No KV event publisher: the router says it scores the worker on load alone.
	route, err := runTandem("route", "--router", c.rtr, "--explain", "Where would this go?")
	if err != nil || !strings.Contains(route, "no KV events from its engine: scored on load alone") {
		t.Errorf("tandem route --explain: %v\n%s", err, route)
	}
}

// TensorRT-LLM and SGLang: the remote path sends their documented legs.
func TestGPUTRTLLMAndSGLangRemote(t *testing.T) {
	for _, kind := range []fakeengine.Kind{fakeengine.TRTLLM, fakeengine.SGLang} {
		t.Run(string(kind), func(t *testing.T) {
			c := startGPUCluster(t, kind)
			out, _ := complete(t, c.fe, gpuLongPrompt)
			if out.Tandem.PrefillPath != "remote" || out.Usage.CompletionTokens != 4 {
				t.Fatalf("long prompt: %+v", out)
			}
			pre, dec := c.p.Completions(), c.d.Completions()
			if len(pre) != 1 || len(dec) != 1 || pre[0].RequestID != dec[0].RequestID {
				t.Fatalf("legs: %d prefill, %d decode", len(pre), len(dec))
			}
			switch kind {
			case fakeengine.TRTLLM:
				want := wantBody(t, pre[0], `{"model":"fake-model","prompt":%s,"max_tokens":1,"temperature":0,"seed":5,"stream":false,`+
					`"stop_token_ids":[50256],"detokenize":false,"disaggregated_params":{"request_type":"context_only"}}`)
				if string(pre[0].Body) != want {
					t.Errorf("context leg\n%s\nwant\n%s", pre[0].Body, want)
				}
				params, _ := json.Marshal(fakeengine.TRTParams{RequestType: "generation_only", FirstGenTokens: []uint32{11}, CtxRequestID: 4242,
					EncodedOpaqueState: "b3BhcXVlLXN0YXRl", DisaggRequestID: 99})
				if got := rawField(dec[0].Body, "disaggregated_params"); !jsonSame(got, params) {
					t.Errorf("generation leg's disaggregated_params %s, want %s", got, params)
				}
			case fakeengine.SGLang:
				// The prefill leg is the decode leg's body, not streamed.
				want := fmt.Sprintf(`{"model":"fake-model","prompt":%s,"max_tokens":4,"temperature":0,"seed":5,"stream":false,`+
					`"stop_token_ids":[50256],"return_token_ids":true,"bootstrap_host":"10.1.2.3","bootstrap_port":8998,"bootstrap_room":%s}`,
					rawField(pre[0].Body, "prompt"), rawField(pre[0].Body, "bootstrap_room"))
				if string(pre[0].Body) != want {
					t.Errorf("prefill leg\n%s\nwant\n%s", pre[0].Body, want)
				}
				for _, k := range []string{"bootstrap_host", "bootstrap_port", "bootstrap_room", "prompt", "max_tokens", "seed"} {
					if p, d := rawField(pre[0].Body, k), rawField(dec[0].Body, k); string(p) != string(d) {
						t.Errorf("%s: prefill leg %s, decode leg %s: the same body goes to both", k, p, d)
					}
				}
			}
		})
	}
}

// Each rung of the ladder: a prefill engine that answers 503, hangs past the
// deadline or returns no parameters leaves the request to the decode engine,
// which prefills it locally (no transfer parameters), path fallback.
func TestGPULadder(t *testing.T) {
	c := startGPUCluster(t, fakeengine.VLLM, "--remote-deadline-min", "300ms", "--remote-deadline-max", "1s")
	for _, rung := range []struct {
		fault  fakeengine.PrefillFault
		reason string
	}{
		{fakeengine.Prefill503, "remote_error_before_kv"},
		{fakeengine.PrefillHang, "remote_timeout"},
		{fakeengine.PrefillNoParams, "remote_error_before_kv"},
	} {
		c.p.SetPrefillFault(rung.fault)
		before := len(c.d.Completions())
		out, _ := complete(t, c.fe, gpuLongPrompt+string(rung.fault))
		if out.Tandem.PrefillPath != "fallback" || out.Tandem.PrefillReason != rung.reason || out.Usage.CompletionTokens != 4 {
			t.Errorf("prefill engine %q: %+v", rung.fault, out.Tandem)
		}
		dec := c.d.Completions()[before:]
		if len(dec) != 1 || rawField(dec[0].Body, "kv_transfer_params") != nil {
			t.Errorf("prefill engine %q: the decode engine got %d requests, the last %s", rung.fault, len(dec), dec[len(dec)-1].Body)
		}
		if rung.fault == fakeengine.PrefillHang {
			select {
			case <-c.p.Cancelled():
			case <-time.After(10 * time.Second):
				t.Error("the hanging prefill leg was never cancelled")
			}
		}
	}
}

// A client that goes away mid-stream cancels the engine's HTTP request.
func TestGPUClientCancelReachesEngine(t *testing.T) {
	c := startGPUCluster(t, fakeengine.VLLM)
	ctx, cancel := context.WithCancel(t.Context())
	body := `{"model":"fake-model","prompt":"Hi","max_tokens":500,"stream":true}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.fe+"/v1/completions", strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rid := resp.Header.Get("x-request-id")
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "data:") {
	}
	cancel()
	resp.Body.Close()
	select {
	case id := <-c.d.Cancelled():
		if id != rid {
			t.Errorf("the engine saw %q cancelled, the client's request was %q", id, rid)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the engine's request was never cancelled")
	}
}

// runTandem runs the tandem binary and returns its combined output.
func runTandem(args ...string) (string, error) {
	out, err := exec.Command(tandemBin, args...).CombinedOutput()
	return string(out), err
}

var cachedRe = regexp.MustCompile(`decode worker: (\S+) \(\S+\) with (\d+) blocks cached`)

// routeTo is where the router sends text now, and how many blocks it finds cached there.
func routeTo(t *testing.T, rtr, text string) (string, int) {
	t.Helper()
	out, err := runTandem("route", "--router", rtr, text)
	if err != nil {
		t.Fatalf("tandem route: %v\n%s", err, out)
	}
	m := cachedRe.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("tandem route said\n%s", out)
	}
	n := 0
	fmt.Sscan(m[2], &n)
	return m[1], n
}
