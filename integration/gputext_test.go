package integration

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/internal/testutil/fakeengine"
	frontendv1 "github.com/tandem-serve/tandem/proto/tandem/frontend/v1"
	"github.com/tandem-serve/tandem/proto/tandem/frontend/v1/frontendv1connect"
	"github.com/tandem-serve/tandem/tokenizer"
)

// storiesGGUF is stories260K, whose 512-token SentencePiece vocabulary (llama-spm)
// spells a word-start space "▁" and has byte tokens for what it lacks.
const storiesGGUF = "../models/stories260K.gguf"

// An engine that streams only text (--engine-token-ids text), with a SentencePiece
// vocabulary: the client gets exactly the engine's text over HTTP, streamed or
// not, and over Connect, and usage is the engine's count. Tokenizing that text
// again and decoding the ids gave " The  temperature  here  is  twent y -five".
func TestGPUTextModeSentencePiece(t *testing.T) {
	f, err := gguf.Open(storiesGGUF)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromGGUF(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	const want = " The temperature here is twenty-five °C." // "°" is two byte tokens in this vocabulary
	ids := tok.Encode(strings.TrimPrefix(want, " "))
	// What vLLM's detokenizer sends for each id of a continuation: the piece with
	// "▁" as a space, and a byte token's text only once its character is whole.
	text, detok := map[uint32]string{}, tokenizer.NewDetokenizer(tok)
	var joined string
	for _, id := range ids {
		s := detok.Add(id)
		if prev, ok := text[id]; ok && prev != s {
			t.Fatalf("token %d reads %q and %q: the fake's Text cannot say both", id, prev, s)
		}
		text[id], joined = s, joined+s
	}
	if joined != want {
		t.Fatalf("the fake would stream %q, not %q", joined, want)
	}
	eng := (&fakeengine.Server{Kind: fakeengine.VLLM, Output: append(ids, tok.EOS()),
		Text: func(id uint32) string { return text[id] }}).Start(t)
	dec := startService(t, "decode", "--listen", "127.0.0.1:0", "--id", "decode-text", "--engine", "vllm", "--engine-url", eng.URL(),
		"--engine-token-ids", "text", "--tokenizer", storiesGGUF, "--model", "fake-model", "--engine-wait", "30s")
	rtr := startService(t, "router", "--listen", "127.0.0.1:0", "--decode-workers", dec)
	fe := startService(t, "frontend", "--listen", "127.0.0.1:0", "--router", rtr)
	waitHealthy(t, fe)
	// vLLM counts the EOS it stopped at; so does the usage the client gets.
	wantTokens := len(ids) + 1

	post := func(body string) *http.Response {
		t.Helper()
		resp, err := http.Post("http://"+fe+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("status %d for %s", resp.StatusCode, body)
		}
		return resp
	}
	type answer struct {
		Choices []struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
			Logprobs     *struct {
				Tokens []string `json:"tokens"`
			} `json:"logprobs"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	whole := func(extra string) answer {
		t.Helper()
		resp := post(`{"model":"fake-model","prompt":"Hi there","max_tokens":64,"temperature":0` + extra + `}`)
		defer resp.Body.Close()
		var out answer
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Choices) != 1 {
			t.Fatalf("answer: %v %+v", err, out)
		}
		return out
	}
	if a := whole(""); a.Choices[0].Text != want || a.Choices[0].FinishReason != "stop" || a.Usage.CompletionTokens != wantTokens {
		t.Errorf("not streamed: %+v; want %q, stop, %d completion tokens", a, want, wantTokens)
	}
	// A stop string is found in the engine's text; logprobs name its tokens by it.
	if a := whole(`,"stop":["here"]`); a.Choices[0].Text != " The temperature " || a.Choices[0].FinishReason != "stop" {
		t.Errorf(`with stop "here": %+v`, a)
	}
	if a := whole(`,"logprobs":0`); a.Choices[0].Logprobs == nil || strings.Join(a.Choices[0].Logprobs.Tokens, "") != want {
		t.Errorf("with logprobs: %+v, want tokens spelling %q", a, want)
	}

	resp := post(`{"model":"fake-model","prompt":"Hi there","max_tokens":64,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}`)
	var streamed strings.Builder
	var n int
	done, err := eachSSE(resp.Body, func(data string) bool {
		var c struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Errorf("chunk %s: %v", data, err)
			return false
		}
		for _, ch := range c.Choices {
			streamed.WriteString(ch.Text)
		}
		if c.Usage != nil {
			n = c.Usage.CompletionTokens
		}
		return true
	})
	resp.Body.Close()
	if !done || err != nil || streamed.String() != want || n != wantTokens {
		t.Errorf("streamed: %q with %d completion tokens (done %v, %v); want %q, %d", streamed.String(), n, done, err, want, wantTokens)
	}

	fc := frontendv1connect.NewFrontendServiceClient(http.DefaultClient, "http://"+fe)
	temp := float32(0)
	cs, err := fc.Generate(t.Context(), connect.NewRequest(&frontendv1.GenerateRequest{Model: "fake-model", Prompt: "Hi there",
		MaxTokens: 64, Temperature: &temp}))
	if err != nil {
		t.Fatal(err)
	}
	var viaConnect strings.Builder
	var usage *frontendv1.Usage
	for cs.Receive() {
		viaConnect.WriteString(cs.Msg().GetText())
		if u := cs.Msg().GetUsage(); u != nil {
			usage = u
		}
	}
	if err := cs.Err(); err != nil || viaConnect.String() != want || usage.GetCompletionTokens() != uint32(wantTokens) {
		t.Errorf("Connect: %q, usage %v (%v); want %q, %d", viaConnect.String(), usage, err, want, wantTokens)
	}
	if got := len(eng.Completions()); got != 5 {
		t.Errorf("the engine got %d completions, want 5", got)
	}
}
