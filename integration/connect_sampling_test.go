package integration

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	frontendv1 "github.com/tandem-serve/tandem/proto/tandem/frontend/v1"
	"github.com/tandem-serve/tandem/proto/tandem/frontend/v1/frontendv1connect"
)

// The Connect API's n and sampling controls against stories260K on the native
// engine: n=3 at temperature 1 streams three different answers by index, each
// ended once; logit_bias banning every token but 403 ("▁Once") makes greedy
// say only it, and stop_token_ids ending on it stops at once.
func TestConnectChoicesAndControlsThroughTandem(t *testing.T) {
	_, url := startUpWith(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fc := frontendv1connect.NewFrontendServiceClient(http.DefaultClient, url)
	run := func(req *frontendv1.GenerateRequest) ([]string, []string) {
		t.Helper()
		s, err := fc.Generate(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var texts, finishes []string
		for s.Receive() {
			m := s.Msg()
			for int(m.GetIndex()) >= len(texts) {
				texts, finishes = append(texts, ""), append(finishes, "")
			}
			texts[m.GetIndex()] += m.GetText()
			if m.GetFinishReason() != "" {
				if finishes[m.GetIndex()] != "" {
					t.Errorf("answer %d finished twice", m.GetIndex())
				}
				finishes[m.GetIndex()] = m.GetFinishReason()
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		return texts, finishes
	}

	temp, seed := float32(1), uint64(3)
	texts, finishes := run(&frontendv1.GenerateRequest{Prompt: "Once upon a time", MaxTokens: 16, N: 3, Temperature: &temp, Seed: &seed,
		IgnoreEos: true})
	if len(texts) != 3 || texts[0] == texts[1] || texts[1] == texts[2] || texts[0] == texts[2] || strings.Join(finishes, ",") != "length,length,length" {
		t.Errorf("n=3 at temperature 1: %q, finishes %q; want three different answers to length", texts, finishes)
	}

	zero := float32(0)
	ban := map[uint32]float32{}
	for id := range uint32(512) {
		if id != 403 {
			ban[id] = -100
		}
	}
	texts, _ = run(&frontendv1.GenerateRequest{Prompt: "Once upon a time", MaxTokens: 3, Temperature: &zero, LogitBias: ban})
	if len(texts) != 1 || texts[0] != " Once Once Once" {
		t.Errorf("with all but token 403 banned: %q", texts)
	}
	texts, finishes = run(&frontendv1.GenerateRequest{Prompt: "Once upon a time", MaxTokens: 3, Temperature: &zero, LogitBias: ban,
		StopTokenIds: []uint32{403}})
	if len(texts) != 1 || texts[0] != "" || finishes[0] != "stop" {
		t.Errorf("stopping at token 403: %q finish %q, want nothing and stop", texts, finishes)
	}
}
