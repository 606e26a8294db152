package decode_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/engine/sim"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
)

// A request for the prompt's logprobs is prefilled on the decode worker, even
// under always-remote with a prefill worker at hand: a prefill worker hands over
// KV, not logits. The prompt is computed whole, though cached here (the decision
// says 0 cached tokens); the first message carries one logprob per prompt token
// after the first, and the prefill worker is not called.
func TestPromptLogprobsPrefillLocally(t *testing.T) {
	pf := &staticPrefillers{}
	pnode := startPrefill(t, newNativeModel(t, "stories260K"), "p0")
	pf.add("p0", pnode.client)
	dec := startDecode(t, newNativeModel(t, "stories260K"), pf, alwaysRemote, 30*time.Second, time.Minute)
	p := prompt(3, 40)
	for i := range p {
		p[i] %= 512
	}
	// The prompt once without: prefilled remotely, its KV now cached here.
	if r, err := generate(t, context.Background(), dec.client, request("warm", p, 0, 0, "p0")); err != nil ||
		r.decision.GetPath() != decodev1.PrefillPath_PREFILL_PATH_REMOTE {
		t.Fatalf("warm-up: %v, path %v", err, r.decision.GetPath())
	}
	queried := pnode.eng.Stats().PrefixQueryTokens
	req := request("echo", p, 0, 0, "p0")
	req.PromptLogprobs = true
	stream, err := dec.client.Generate(context.Background(), connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatal(stream.Err())
	}
	first := stream.Msg()
	for stream.Receive() {
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	d := first.GetPrefill()
	if d.GetPath() != decodev1.PrefillPath_PREFILL_PATH_LOCAL || d.GetReason() != "prompt_logprobs" || d.GetCachedTokens() != 0 {
		t.Errorf("path %v reason %q cached %d, want local for prompt_logprobs with nothing reused", d.GetPath(), d.GetReason(), d.GetCachedTokens())
	}
	if lps := first.GetPromptLogprobs(); len(lps) != len(p)-1 || len(lps[0].GetTop()) != 3 {
		t.Errorf("%d prompt logprobs on the first message, want %d with 3 alternatives each", len(lps), len(p)-1)
	}
	if st := pnode.eng.Stats(); st.PrefixQueryTokens != queried {
		t.Errorf("the prefill worker saw %d more prompt tokens", st.PrefixQueryTokens-queried)
	}
}

// An engine that computes no prompt logprobs (the sim engine's tokens are
// placeholders) refuses the request as InvalidArgument, naming them.
func TestPromptLogprobsRefusedBySim(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.TimeScale = 0
	eng, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	dec := startDecode(t, eng, nil, decode.Params{Policy: decode.PolicyAlwaysLocal}, time.Second, time.Minute)
	req := request("echo", []uint32{1, 2, 3}, 0, 0)
	req.PromptLogprobs = true
	_, err = generate(t, context.Background(), dec.client, req)
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
		t.Errorf("%v, want InvalidArgument", err)
	}
}
