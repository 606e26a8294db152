package frontend

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	frontendv1 "github.com/tandem-serve/tandem/proto/tandem/frontend/v1"
)

// ignore_eos (vLLM's extension) sends the decode worker no stop tokens, and an
// EOS the model emits anyway does not end the answer in the frontend either:
// it runs to max_tokens. Without it, the same output stops at the EOS.
func TestIgnoreEOSRunsToMaxTokens(t *testing.T) {
	tok := testTokenizer(t)
	eos := tok.EOS()
	ids := append(tok.Encode(" one two"), eos)
	ids = append(ids, tok.Encode(" three")...)
	b := &fakeBackend{output: ids, perMsg: 1}
	f, _ := newTestFrontend(t, testConfig(), b)
	srv := newHTTPServer(t, f)

	for _, c := range []struct {
		body       string
		wantText   string
		wantFinish string
		wantTokens int
		wantStops  bool
	}{
		{`{"prompt": "Hi", "max_tokens": 4}`, " one two", "stop", 3, true},
		{`{"prompt": "Hi", "max_tokens": 4, "ignore_eos": false}`, " one two", "stop", 3, true},
		{`{"prompt": "Hi", "max_tokens": 4, "ignore_eos": true}`, " one two three", "length", 4, false},
	} {
		resp, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Choices []struct {
				Text         string `json:"text"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || len(out.Choices) != 1 {
			t.Fatalf("%s: status %d, %+v, %v", c.body, resp.StatusCode, out, err)
		}
		ch := out.Choices[0]
		if ch.Text != c.wantText || ch.FinishReason != c.wantFinish || out.Usage.CompletionTokens != c.wantTokens {
			t.Errorf("%s: text %q finish %q, %d tokens; want %q, %q, %d", c.body, ch.Text, ch.FinishReason,
				out.Usage.CompletionTokens, c.wantText, c.wantFinish, c.wantTokens)
		}
		if stops := b.lastReq().GetStopTokenIds(); slices.Contains(stops, eos) != c.wantStops {
			t.Errorf("%s: the decode worker was sent stop tokens %v", c.body, stops)
		}
	}
}

// The same over FrontendService (Connect, Connect's gRPC protocol and grpc-go): ignore_eos runs to max_tokens past the EOS.
func TestIgnoreEOSOverRPC(t *testing.T) {
	tok := testTokenizer(t)
	eos := tok.EOS()
	ids := append(tok.Encode(" one two"), eos)
	ids = append(ids, tok.Encode(" three")...)
	b := &fakeBackend{output: ids, perMsg: 1}
	f, _ := newTestFrontend(t, testConfig(), b)
	for name, c := range rpcClients(t, f, false) {
		for _, ignore := range []bool{false, true} {
			res := c.generate(t.Context(), &frontendv1.GenerateRequest{Prompt: "Hi", MaxTokens: 4, IgnoreEos: ignore}, "rpc-eos")
			if res.code != 0 || len(res.msgs) == 0 {
				t.Fatalf("%s: %v %s", name, res.code, res.message)
			}
			var text strings.Builder
			for _, m := range res.msgs {
				text.WriteString(m.GetText())
			}
			last := res.msgs[len(res.msgs)-1]
			want, finish, tokens := " one two", "stop", uint32(3)
			if ignore {
				want, finish, tokens = " one two three", "length", 4
			}
			if text.String() != want || last.GetFinishReason() != finish || last.GetUsage().GetCompletionTokens() != tokens {
				t.Errorf("%s, ignore_eos %v: text %q finish %q, %d tokens; want %q, %q, %d", name, ignore, text.String(),
					last.GetFinishReason(), last.GetUsage().GetCompletionTokens(), want, finish, tokens)
			}
			if stops := b.lastReq().GetStopTokenIds(); slices.Contains(stops, eos) == ignore {
				t.Errorf("%s, ignore_eos %v: the decode worker was sent stop tokens %v", name, ignore, stops)
			}
		}
	}
}
