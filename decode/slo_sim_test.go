package decode_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/decode"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
)

// The slo policy on the sim's modelled H100 (time scale 1: modelled ms are wall
// ms): a 16k-token prompt, whose local prefill stalls the batch for about 575
// ms, is prefilled here while the one sequence decoding has 2,000 tokens to go
// (at a 30 ms TPOT objective and ~7 ms steps it can absorb tens of seconds),
// and sent to the prefill worker while the one decoding has 40 tokens to go
// (about 0.9 s of slack, half of which is less than the stall).
func TestSLOPolicyKeepsTheBatchsTPOT(t *testing.T) {
	pf := &staticPrefillers{}
	pre := startPrefill(t, simH100(t, 1), "prefill-0")
	pf.add("prefill-0", pre.client)
	reg := prometheus.NewRegistry()
	slo := decode.Params{Policy: decode.PolicySLO, ShortPrefillThreshold: 128, TTFTSLOMs: 2000, TPOTSLOMs: 30}
	node := startDecodeReg(t, simH100(t, 1), pf, decode.Params{Policy: decode.PolicyAlwaysLocal}, reg)
	run := func(id string, p []uint32, max uint32) *decodev1.PrefillDecision {
		t.Helper()
		r := request(id, p, 0, 0, "prefill-0")
		r.MaxTokens = max
		res, err := generate(t, context.Background(), node.client, r)
		if err != nil {
			t.Fatal(err)
		}
		return res.decision
	}
	// Warm-up: local prefills of assorted lengths, then remote ones.
	seed := 0
	for _, n := range []int{512, 16384, 2048, 8192, 4096} {
		seed++
		run("warm-local", prompt(seed, n), 2)
	}
	if err := node.svc.SetParams(decode.Params{Policy: decode.PolicyAlwaysRemote}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1024, 8192, 4096} {
		seed++
		run("warm-remote", prompt(seed, n), 2)
	}
	if err := node.svc.SetParams(slo); err != nil {
		t.Fatal(err)
	}

	// decoding starts a sequence of max tokens and returns once its second token
	// has arrived; stop ends it.
	decoding := func(id string, max uint32) (stop func()) {
		t.Helper()
		seed++
		ctx, cancel := context.WithCancel(context.Background())
		r := request(id, prompt(seed, 64), 0, 0)
		r.MaxTokens = max
		s, err := node.client.Generate(ctx, connect.NewRequest(r))
		if err != nil {
			t.Fatal(err)
		}
		for got := 0; got < 2; {
			if !s.Receive() {
				t.Fatalf("%s ended early: %v", id, s.Err())
			}
			got += len(s.Msg().GetTokenIds())
		}
		return func() { cancel(); _ = s.Close() }
	}
	for _, tc := range []struct {
		name   string
		max    uint32
		path   decodev1.PrefillPath
		reason string
	}{
		{"2,000 tokens to go", 2000, decodev1.PrefillPath_PREFILL_PATH_LOCAL, "slo_local_fits"},
		{"40 tokens to go", 42, decodev1.PrefillPath_PREFILL_PATH_REMOTE, "slo_remote_tpot_budget"},
	} {
		stop := decoding("running", tc.max)
		seed++
		d := run("long", prompt(seed, 16384), 2)
		stop()
		if d.GetPath() != tc.path || d.GetReason() != tc.reason {
			t.Errorf("%s: path %v reason %q, want %v %q (%s)", tc.name, d.GetPath(), d.GetReason(), tc.path, tc.reason, d.GetDetail())
		} else {
			t.Logf("%s: %s", tc.name, d.GetDetail())
		}
	}
	if v := gauge(t, reg, "tandem_decode_tpot_slack_seconds"); v <= 0 || v > 2 {
		t.Errorf("tandem_decode_tpot_slack_seconds %g after the tight batch, want its slack (under 2 s)", v)
	}
}
