package integration

import (
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/internal/testutil/fakeengine"
)

// echo with logprobs through tandem in front of GPU engines: vLLM's decode
// worker is asked for the prompt's logprobs unstreamed (prompt_logprobs), even for
// a long prompt that would go to the prefill worker, and the client gets them
// as vLLM reported them, the first null; SGLang and TensorRT-LLM are asked for
// none: a 400 naming echo, with no engine request.
func TestGPUEcho(t *testing.T) {
	c := startGPUCluster(t, fakeengine.VLLM)
	body := `{"model":"fake-model","prompt":` + jsonString(gpuLongPrompt) + `,"max_tokens":0,"echo":true,"logprobs":1}`
	resp, err := http.Post("http://"+c.fe+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var out completionJSON
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	ch := out.Choices[0]
	if ch.Text != gpuLongPrompt || ch.FinishReason != "length" || ch.Logprobs == nil || out.Usage.CompletionTokens != 0 {
		t.Fatalf("answer %+v, usage %+v", ch, out.Usage)
	}
	lps := ch.Logprobs.TokenLogprobs
	if len(lps) != out.Usage.PromptTokens || lps[0] != nil {
		t.Fatalf("%d token logprobs for %d prompt tokens, first %v", len(lps), out.Usage.PromptTokens, lps[0])
	}
	for k := 1; k < len(lps); k++ {
		if lps[k] == nil || math.Abs(*lps[k]-fakeengine.PromptLogprob(k)) > 1e-6 || len(ch.Logprobs.TopLogprobs[k]) != 1 {
			t.Fatalf("prompt token %d: %v %v, want vLLM's %g with one alternative", k, lps[k], ch.Logprobs.TopLogprobs[k], fakeengine.PromptLogprob(k))
		}
	}
	if len(c.p.Completions()) != 0 || len(c.d.Completions()) != 1 {
		t.Fatalf("prefill engine saw %d requests, decode engine %d; want the decode worker's alone", len(c.p.Completions()), len(c.d.Completions()))
	}
	var sent struct {
		Stream         bool `json:"stream"`
		PromptLogprobs *int `json:"prompt_logprobs"`
		MaxTokens      int  `json:"max_tokens"`
	}
	_ = json.Unmarshal(c.d.Completions()[0].Body, &sent)
	if sent.Stream || sent.PromptLogprobs == nil || *sent.PromptLogprobs != 1 || sent.MaxTokens != 1 {
		t.Errorf("vLLM was sent %s", c.d.Completions()[0].Body)
	}

	for _, kind := range []fakeengine.Kind{fakeengine.SGLang, fakeengine.TRTLLM} {
		c := startGPUCluster(t, kind)
		resp, err := http.Post("http://"+c.fe+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"fake-model","prompt":"hi","max_tokens":0,"echo":true,"logprobs":0}`))
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Error struct {
				Message string  `json:"message"`
				Param   *string `json:"param"`
			} `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || e.Error.Param == nil || *e.Error.Param != "echo" || !strings.Contains(e.Error.Message, string(kind)) {
			t.Errorf("%s: %d %+v, want a 400 naming echo and the engine", kind, resp.StatusCode, e.Error)
		}
		if n := len(c.d.Completions()) + len(c.p.Completions()); n != 0 {
			t.Errorf("%s: %d engine requests", kind, n)
		}
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
