package integration

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tandem-serve/tandem/internal/testutil"
	"github.com/tandem-serve/tandem/internal/testutil/fakeengine"
	frontendv1 "github.com/tandem-serve/tandem/proto/tandem/frontend/v1"
	"github.com/tandem-serve/tandem/proto/tandem/frontend/v1/frontendv1connect"
)

// An engine that fails is the engine's failure all the way to the client: a 502
// (or an SSE error event once the stream began) whose message names the engine,
// and Internal over Connect; never a client's cancel (499), and never a hang.

// openAIErr is an HTTP error body, or an SSE error event's data.
type openAIErr struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error"`
}

// postCompletion posts a short completion (prefilled on the decode engine) and
// returns the status and body.
func postCompletion(t *testing.T, fe string, stream bool, limit time.Duration) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	body := `{"model":"fake-model","prompt":"Hi there","max_tokens":6,"temperature":0,"stream":` + map[bool]string{true: "true", false: "false"}[stream] + `}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+fe+"/v1/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the request did not end within %s: %v", limit, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer within %s: %v", limit, err)
	}
	return resp.StatusCode, string(b)
}

// engineErrorOf finds the error a client was shown: the body of an HTTP error,
// or the data of the stream's error event.
func engineErrorOf(status int, body string) string {
	if status != http.StatusOK {
		var e openAIErr
		_ = json.Unmarshal([]byte(body), &e)
		return e.Error.Message
	}
	msg := ""
	_, _ = eachSSE(strings.NewReader(body), func(data string) bool {
		var e openAIErr
		if json.Unmarshal([]byte(data), &e) == nil && e.Error.Message != "" {
			msg = e.Error.Message
			return false
		}
		return true
	})
	return msg
}

func TestGPUEngineFailureReachesClient(t *testing.T) {
	for _, kind := range []fakeengine.Kind{fakeengine.VLLM, fakeengine.TRTLLM, fakeengine.SGLang} {
		t.Run(string(kind), func(t *testing.T) { engineFailures(t, kind) })
	}
}

func engineFailures(t *testing.T, kind fakeengine.Kind) {
	c := startGPUCluster(t, kind)
	where := string(kind) + " at " + c.d.URL()
	fc := frontendv1connect.NewFrontendServiceClient(http.DefaultClient, "http://"+c.fe)
	for _, fault := range []fakeengine.StreamFault{fakeengine.StreamGarbage, fakeengine.StreamDie, fakeengine.StreamHTML} {
		t.Run(string(fault), func(t *testing.T) {
			c.d.SetStreamFault(fault, 2)
			defer c.d.SetStreamFault(fakeengine.StreamOK, 0)
			for _, stream := range []bool{false, true} {
				status, body := postCompletion(t, c.fe, stream, 30*time.Second)
				msg := engineErrorOf(status, body)
				if stream && fault != fakeengine.StreamHTML && status != http.StatusOK {
					t.Errorf("stream=%v: status %d after tokens were sent, want 200 and an error event", stream, status)
				}
				if !stream && status != http.StatusBadGateway {
					t.Errorf("stream=%v: status %d, want 502 (the engine failed): %s", stream, status, body)
				}
				if !strings.Contains(msg, where) || strings.Contains(msg, "context canceled") {
					t.Errorf("stream=%v: the client was told %q (status %d), want the engine's failure naming %s", stream, msg, status, where)
				}
			}
			// Connect: the code says the server side failed, and the message names the engine.
			s, err := fc.Generate(t.Context(), connect.NewRequest(&frontendv1.GenerateRequest{Prompt: "Hi there", MaxTokens: 6}))
			if err == nil {
				for s.Receive() {
				}
				err = s.Err()
			}
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeInternal || !strings.Contains(ce.Message(), where) {
				t.Errorf("Connect Generate ended with %v, want Internal naming %s", err, where)
			}
		})
	}
}

// A silent engine ends the request within its bound: no headers (a wedged event
// loop) and a stall between tokens, each naming the flag that sets the bound.
func TestGPUSilentEngineIsBounded(t *testing.T) {
	c := startGPUCluster(t, fakeengine.VLLM, "--engine-header-timeout", "1s", "--engine-token-timeout", "1s")
	for _, tc := range []struct {
		fault fakeengine.StreamFault
		flag  string
	}{{fakeengine.StreamSilent, "--engine-header-timeout"}, {fakeengine.StreamStall, "--engine-token-timeout"}} {
		c.d.SetStreamFault(tc.fault, 2)
		start := time.Now()
		status, body := postCompletion(t, c.fe, false, 20*time.Second)
		msg := engineErrorOf(status, body)
		if status != http.StatusGatewayTimeout || !strings.Contains(msg, tc.flag) {
			t.Errorf("%s engine: status %d %q after %s, want 504 naming %s", tc.fault, status, msg, time.Since(start).Round(time.Millisecond), tc.flag)
		}
	}
	for _, reason := range []string{"timeout_headers", "timeout_token"} {
		if !metricAtLeast(t, c.dec, `tandem_engine_failures_total{reason="`+reason+`"}`, 1) {
			t.Errorf("the decode worker's metrics count no %s failure", reason)
		}
	}
	c.d.SetStreamFault(fakeengine.StreamOK, 0)
	if status, body := postCompletion(t, c.fe, false, 20*time.Second); status != http.StatusOK {
		t.Errorf("after the faults: status %d %s", status, body)
	}
}

// A dead engine takes its worker out of service within the probe window: health
// NOT_SERVING, tandem workers says why, and long prompts stop going to it (no
// failed attempt first, past the one that tells a decode worker); back in
// service when the engine answers again.
func TestGPUEngineDownAndBack(t *testing.T) {
	// The prefill worker probes fast, to keep the test short.
	c := startGPUClusterWith(t, fakeengine.VLLM, []string{"--engine-health-interval", "100ms", "--engine-health-failures", "2"}, nil)
	pre := c.pre
	if out, _ := complete(t, c.fe, gpuLongPrompt); out.Tandem.PrefillPath != "remote" {
		t.Fatalf("with the engine up: %+v", out.Tandem)
	}
	c.p.Kill()
	testutil.WaitForWithin(t, 10*time.Second, "the prefill worker NOT_SERVING", func() bool {
		_, err := runTandem("health", pre)
		return err != nil
	})
	testutil.WaitForWithin(t, 10*time.Second, "tandem workers naming the dead engine", func() bool {
		out, _ := runTandem("workers", "--router", c.rtr)
		return strings.Contains(out, "unavailable: vllm at "+c.p.URL())
	})
	if up, ok := metricValue(pre, "tandem_engine_up"); !ok || up != 0 {
		t.Errorf("the prefill worker's tandem_engine_up is %v (found %v) with its engine dead, want 0", up, ok)
	}
	ready := readyz(t, pre)
	if !strings.Contains(ready, "does not answer its health check") {
		t.Errorf("/readyz while the engine is down: %s", ready)
	}
	// At most one request per decode worker pays for a failed attempt (the router
	// already offers the worker to none); after it, none do.
	testutil.WaitForWithin(t, 10*time.Second, "long prompts no longer tried on the dead engine", func() bool {
		out, _ := complete(t, c.fe, gpuLongPrompt+" again "+time.Now().String())
		return out.Tandem.PrefillReason == "no_prefill_worker"
	})
	for i := range 3 {
		if out, _ := complete(t, c.fe, gpuLongPrompt+" and again "+strconv.Itoa(i)); out.Tandem.PrefillReason != "no_prefill_worker" {
			t.Errorf("with the prefill engine down, request %d: %+v; want prefilled on the decode engine with no attempt", i, out.Tandem)
		}
	}
	c.p.Revive(t)
	testutil.WaitForWithin(t, 10*time.Second, "the prefill worker SERVING again", func() bool {
		_, err := runTandem("health", pre)
		return err == nil
	})
	testutil.WaitForWithin(t, 10*time.Second, "long prompts remote again", func() bool {
		out, _ := complete(t, c.fe, gpuLongPrompt+" once more "+time.Now().String())
		return out.Tandem.PrefillPath == "remote"
	})
}

// readyz is a worker's GET /readyz body.
func readyz(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.Status + " " + string(b)
}

// A worker whose engine server is not up yet listens at once and says why it
// does not serve, then serves when the server comes.
func TestGPUWorkerWaitsForEngineServing(t *testing.T) {
	f := &fakeengine.Server{Kind: fakeengine.VLLM, TokenIDs: true}
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	w := startService(t, "decode", "--listen", "127.0.0.1:0", "--id", "decode-w", "--engine", "vllm", "--engine-url", "http://"+addr,
		"--tokenizer", gpuTokenizer, "--model", "fake-model", "--engine-wait", "2m")
	if out, err := runTandem("health", w); err == nil {
		t.Errorf("tandem health said SERVING with no engine server: %s", out)
	}
	testutil.WaitForWithin(t, 10*time.Second, "/readyz naming the engine server it waits for", func() bool {
		r := readyz(t, w)
		return strings.HasPrefix(r, "503") && strings.Contains(r, "waiting for the vllm engine server at http://"+addr)
	})
	f.StartOn(t, addr)
	testutil.WaitForWithin(t, 30*time.Second, "the worker SERVING once its engine server answers", func() bool {
		_, err := runTandem("health", w)
		return err == nil
	})
	if r := readyz(t, w); !strings.HasPrefix(r, "200") {
		t.Errorf("/readyz once serving: %s", r)
	}
}
