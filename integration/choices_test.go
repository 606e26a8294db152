package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// Through the OpenAI SDK against stories260K on the native engine: n=3 at
// temperature 1 gives three different choices (each its own seed) and at
// temperature 0 three identical ones, whole and streamed; a batch of two prompts
// with n=2 answers prompt i at indices 2i and 2i+1, with usage summed.
func TestChoicesAndBatches(t *testing.T) {
	_, url := startUpWith(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	prompt := func(ps ...string) openai.CompletionNewParamsPromptUnion {
		if len(ps) == 1 {
			return openai.CompletionNewParamsPromptUnion{OfString: openai.String(ps[0])}
		}
		return openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: ps}
	}
	// run returns the choices' texts by index, whole or streamed, and the usage.
	run := func(p openai.CompletionNewParams, stream bool) ([]string, openai.CompletionUsage) {
		t.Helper()
		p.Model = "stories260K"
		// Without EOS every choice runs to max_tokens, so the counts are exact.
		eos := option.WithJSONSet("ignore_eos", true)
		if !stream {
			resp, err := client.Completions.New(ctx, p, eos)
			if err != nil {
				t.Fatal(err)
			}
			texts := make([]string, len(resp.Choices))
			for i, c := range resp.Choices {
				if c.Index != int64(i) || c.FinishReason != "length" {
					t.Errorf("choice %d: index %d finish %q", i, c.Index, c.FinishReason)
				}
				texts[i] = c.Text
			}
			return texts, resp.Usage
		}
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		s := client.Completions.NewStreaming(ctx, p, eos)
		var texts []string
		var u openai.CompletionUsage
		for s.Next() {
			for _, c := range s.Current().Choices {
				for int(c.Index) >= len(texts) {
					texts = append(texts, "")
				}
				texts[c.Index] += c.Text
			}
			if s.Current().Usage.TotalTokens > 0 {
				u = s.Current().Usage
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		return texts, u
	}

	for _, stream := range []bool{false, true} {
		sampled, u := run(openai.CompletionNewParams{Prompt: prompt("Once upon a time"), N: openai.Int(3), MaxTokens: openai.Int(16),
			Temperature: openai.Float(1), Seed: openai.Int(7)}, stream)
		if len(sampled) != 3 || sampled[0] == sampled[1] || sampled[1] == sampled[2] || sampled[0] == sampled[2] {
			t.Errorf("stream=%v: n=3 at temperature 1 gave %q, want 3 different choices", stream, sampled)
		}
		if u.CompletionTokens != 48 {
			t.Errorf("stream=%v: usage %+v, want 48 completion tokens", stream, u)
		}
		greedy, _ := run(openai.CompletionNewParams{Prompt: prompt("Once upon a time"), N: openai.Int(3), MaxTokens: openai.Int(8),
			Temperature: openai.Float(0)}, stream)
		if len(greedy) != 3 || greedy[0] != greedy[1] || greedy[1] != greedy[2] {
			t.Errorf("stream=%v: n=3 at temperature 0 gave %q, want 3 identical choices", stream, greedy)
		}
	}

	greedy := openai.CompletionNewParams{MaxTokens: openai.Int(8), Temperature: openai.Float(0)}
	alone := func(p string) (string, int64) {
		q := greedy
		q.Prompt = prompt(p)
		texts, u := run(q, false)
		return texts[0], u.PromptTokens
	}
	a, aLen := alone("Once upon a time")
	b, bLen := alone("The little dog")
	if a == b {
		t.Fatalf("both prompts answer %q; the batch's order would show nothing", a)
	}
	for _, stream := range []bool{false, true} {
		q := greedy
		q.Prompt, q.N = prompt("Once upon a time", "The little dog"), openai.Int(2)
		texts, u := run(q, stream)
		if len(texts) != 4 || texts[0] != a || texts[1] != a || texts[2] != b || texts[3] != b {
			t.Errorf("stream=%v: batch of 2 with n=2 gave %q, want [%q %q %q %q]", stream, texts, a, a, b, b)
		}
		if u.PromptTokens != aLen+bLen || u.CompletionTokens != 32 {
			t.Errorf("stream=%v: usage %+v, want prompt %d completion 32", stream, u, aLen+bLen)
		}
	}
}

// A client that leaves a stream of n=3 ends all three choices: the frontend logs
// each choice's generation as ended (its backend stream closed), not left running.
func TestChoicesClientCancel(t *testing.T) {
	p, url := startUpWith(t, []string{"TANDEM_LOG_LEVEL=info"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	s := client.Completions.NewStreaming(ctx, openai.CompletionNewParams{Model: "stories260K", N: openai.Int(3), MaxTokens: openai.Int(400),
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}}, option.WithHeader("X-Request-Id", "cancel-n3"),
		option.WithJSONSet("ignore_eos", true))
	if !s.Next() {
		t.Fatalf("no first chunk: %v", s.Err())
	}
	cancel()
	_ = s.Close()
	ended := func() int {
		n := 0
		for line := range strings.Lines(p.logs()) {
			if strings.Contains(line, "generation ended") && strings.Contains(line, "cancel-n3-") {
				n++
				// Cut short with no finish reason, not run to its end unread.
				if !strings.Contains(line, `"finish_reason":""`) {
					t.Errorf("a choice finished after the client left: %s", line)
				}
			}
		}
		return n
	}
	deadline := time.Now().Add(30 * time.Second) // a deadlock guard, not a speed check
	for ended() < 3 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := ended(); n != 3 {
		t.Fatalf("%d of 3 choices logged as ended after the client left\n%s", n, p.logs())
	}
}

// The n choices of one prompt share its prefill: the first runs alone, the rest
// start once its first token is back and find the prompt's blocks in the prefix
// cache, so the worker's cache hits grow by the prompt's full blocks for each.
func TestChoicesSharePrefill(t *testing.T) {
	dec := startService(t, "decode", "--listen", "127.0.0.1:0", "--id", "agg-n", "--mode", "aggregated")
	rtr := startService(t, "router", "--listen", "127.0.0.1:0", "--decode-workers", dec)
	fe := startService(t, "frontend", "--listen", "127.0.0.1:0", "--router", rtr)
	waitHealthy(t, fe)
	before, _ := metricValue(dec, "tandem_prefix_cache_hits_total")
	prompt := strings.Repeat("The little dog ran to the park and played with a red ball all day long. ", 6)
	body := `{"prompt":` + strconv.Quote(prompt) + `,"n":3,"max_tokens":4,"temperature":0}`
	resp, err := http.Post("http://"+fe+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || len(out.Choices) != 3 {
		t.Fatalf("status %d, %d choices: %v", resp.StatusCode, len(out.Choices), err)
	}
	resp.Body.Close()
	after, _ := metricValue(dec, "tandem_prefix_cache_hits_total")
	// Every full block but the one holding the last prompt token can be reused.
	want := float64(2 * ((out.Usage.PromptTokens - 1) / 16 * 16))
	if out.Usage.PromptTokens < 64 || after-before < want {
		t.Errorf("prompt of %d tokens, n=3: the worker's prefix cache hits grew by %g tokens, want at least %g (two choices reusing the first's prefill)",
			out.Usage.PromptTokens, after-before, want)
	}
}
