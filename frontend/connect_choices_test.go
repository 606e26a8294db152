package frontend

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"

	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	frontendv1 "github.com/tandem-serve/tandem/proto/tandem/frontend/v1"
)

// Over Connect, gRPC-over-Connect and grpc-go: n=3 streams three answers, each
// message with its index; each answer has its first message (request id,
// prefill), its text and its last (finish, its own usage), and is its own
// backend request with seed+i. The sampling controls reach the backend as the
// HTTP API's do, and bad ones are refused naming the field.
func TestConnectChoicesAndControls(t *testing.T) {
	tok := testTokenizer(t)
	b := &fakeBackend{output: tok.Encode(answer), perMsg: 2, path: decodev1.PrefillPath_PREFILL_PATH_LOCAL}
	f, _ := newTestFrontend(t, testConfig(), b)
	for name, c := range rpcClients(t, f, false) {
		t.Run(name, func(t *testing.T) {
			seed, temp := uint64(5), float32(1)
			id := "rpc-n-" + name
			res := c.generate(context.Background(), &frontendv1.GenerateRequest{Prompt: "Say hello.", N: 3, Seed: &seed, Temperature: &temp}, id)
			if res.code != 0 {
				t.Fatalf("%v %s", res.code, res.message)
			}
			texts, firsts, lasts := make([]string, 3), make([]int, 3), make([]int, 3)
			for _, m := range res.msgs {
				i := m.GetIndex()
				if i > 2 {
					t.Fatalf("message for answer %d", i)
				}
				if m.GetRequestId() != "" {
					if firsts[i]++; m.GetRequestId() != id || m.GetPrefill().GetPath() != "local" || texts[i] != "" {
						t.Errorf("answer %d: first message %v after text %q", i, m, texts[i])
					}
				}
				texts[i] += m.GetText()
				if m.GetFinishReason() != "" {
					lasts[i]++
					if m.GetFinishReason() != "stop" || m.GetUsage().GetCompletionTokens() != uint32(len(tok.Encode(answer))) {
						t.Errorf("answer %d: last message %v", i, m)
					}
				}
			}
			byID := b.reqsByID()
			for i := range 3 {
				if texts[i] != answer || firsts[i] != 1 || lasts[i] != 1 {
					t.Errorf("answer %d: text %q, %d first and %d last messages", i, texts[i], firsts[i], lasts[i])
				}
				if r := byID[fmt.Sprintf("%s-%d", id, i)]; r == nil || r.GetSampling().GetSeed() != seed+uint64(i) {
					t.Errorf("answer %d: backend request %v, want seed %d", i, r, seed+uint64(i))
				}
			}

			pres, freq, rep, minP := float32(0.5), float32(-0.25), float32(1.25), float32(0.125)
			res = c.generate(context.Background(), &frontendv1.GenerateRequest{Prompt: "Say hello.", PresencePenalty: &pres,
				FrequencyPenalty: &freq, RepetitionPenalty: &rep, MinP: &minP, TopK: 40, LogitBias: map[uint32]float32{15339: -100, 9906: 3},
				StopTokenIds: []uint32{42}}, "rpc-controls-"+name)
			if res.code != 0 {
				t.Fatalf("%v %s", res.code, res.message)
			}
			r := b.lastReq()
			sp := r.GetSampling()
			if sp.GetPresencePenalty() != pres || sp.GetFrequencyPenalty() != freq || sp.GetRepetitionPenalty() != rep || sp.GetMinP() != minP ||
				sp.GetTopK() != 40 || len(sp.GetLogitBias()) != 2 || sp.GetLogitBias()[15339] != -100 || !slices.Contains(r.GetStopTokenIds(), 42) {
				t.Errorf("backend got %v, stop tokens %v", sp, r.GetStopTokenIds())
			}

			bad, zero := float32(3), float32(0)
			for _, tc := range []struct {
				field string
				req   *frontendv1.GenerateRequest
			}{
				{"n", &frontendv1.GenerateRequest{Prompt: "a", N: 17}},
				{"n", &frontendv1.GenerateRequest{Messages: []*frontendv1.ChatMessage{{Role: "user", Content: "a"}}, N: 2,
					Tools: []*frontendv1.Tool{{Name: "f"}}}},
				{"presence_penalty", &frontendv1.GenerateRequest{Prompt: "a", PresencePenalty: &bad}},
				{"frequency_penalty", &frontendv1.GenerateRequest{Prompt: "a", FrequencyPenalty: &bad}},
				{"repetition_penalty", &frontendv1.GenerateRequest{Prompt: "a", RepetitionPenalty: &zero}},
				{"min_p", &frontendv1.GenerateRequest{Prompt: "a", MinP: &bad}},
				{"logit_bias", &frontendv1.GenerateRequest{Prompt: "a", LogitBias: map[uint32]float32{1 << 30: 1}}},
				{"logit_bias", &frontendv1.GenerateRequest{Prompt: "a", LogitBias: map[uint32]float32{5: 101}}},
				{"stop_token_ids", &frontendv1.GenerateRequest{Prompt: "a", StopTokenIds: []uint32{1 << 30}}},
			} {
				res := c.generate(context.Background(), tc.req, "rpc-bad")
				if res.code != connect.CodeInvalidArgument || res.field != tc.field || !strings.Contains(res.message, tc.field) {
					t.Errorf("%v: code %v field %q message %q, want InvalidArgument naming %s", tc.req, res.code, res.field, res.message, tc.field)
				}
			}
		})
	}
}
