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
	reg := prometheus.NewRegistry()
	w := warmSLOSim(t, reg)
	if err := w.node.svc.SetParams(decode.Params{Policy: decode.PolicySLO, ThresholdParams: decode.ThresholdParams{ShortPrefillThreshold: 128},
		SLOParams: decode.SLOParams{TTFTSLOMs: 2000, TPOTSLOMs: 30}}); err != nil {
		t.Fatal(err)
	}
	w.check(t, []sloSimCase{
		{"2,000 tokens to go", 2000, decodev1.PrefillPath_PREFILL_PATH_LOCAL, "slo_local_fits"},
		{"40 tokens to go", 42, decodev1.PrefillPath_PREFILL_PATH_REMOTE, "slo_remote_tpot_budget"},
	})
	if v := gauge(t, reg, "tandem_decode_tpot_slack_seconds"); v <= 0 || v > 2 {
		t.Errorf("tandem_decode_tpot_slack_seconds %g after the tight batch, want its slack (under 2 s)", v)
	}
}

// The same with only the Mooncake paper's objectives, TTFT 30 s and TBT 100 ms:
// the 16k-token prompt is 2 steps of the sim's 8,192-token budget, ~290 ms
// each. A sequence of 2,000 tokens averages its 200 longest gaps and takes
// them; one of 42 averages its 5 longest, and 2 of 5 at ~290 ms is past 80 ms.
func TestSLOPolicyKeepsTheBatchsTBT(t *testing.T) {
	reg := prometheus.NewRegistry()
	w := warmSLOSim(t, reg)
	if err := w.node.svc.SetParams(decode.Params{Policy: decode.PolicySLO, ThresholdParams: decode.ThresholdParams{ShortPrefillThreshold: 128},
		SLOParams: decode.SLOParams{TTFTSLOMs: 30000, TBTSLOMs: 100}}); err != nil {
		t.Fatal(err)
	}
	w.check(t, []sloSimCase{
		{"2,000 tokens to go", 2000, decodev1.PrefillPath_PREFILL_PATH_LOCAL, "slo_local_fits"},
		{"40 tokens to go", 42, decodev1.PrefillPath_PREFILL_PATH_REMOTE, "slo_remote_tbt_budget"},
	})
	// The last decision refused the stall for the tight sequence's TBT: what
	// it projected was past 80 % of the objective, and says so.
	if v := gauge(t, reg, "tandem_decode_tbt_projected_seconds"); v <= 0.08 || v > 10 {
		t.Errorf("tandem_decode_tbt_projected_seconds %g after the tight batch, want its projection, above 80 ms", v)
	}
}

type sloSimCase struct {
	name   string
	max    uint32
	path   decodev1.PrefillPath
	reason string
}

type sloSim struct {
	node *decodeNode
	seed int
}

// warmSLOSim starts a decode worker and a prefill worker on the modelled H100
// and teaches the decode worker's estimator both paths.
func warmSLOSim(t *testing.T, reg *prometheus.Registry) *sloSim {
	pf := &staticPrefillers{}
	pre := startPrefill(t, simH100(t, 1), "prefill-0")
	pf.add("prefill-0", pre.client)
	w := &sloSim{node: startDecodeReg(t, simH100(t, 1), pf, decode.Params{Policy: decode.PolicyAlwaysLocal}, reg)}
	for _, n := range []int{512, 16384, 2048, 8192, 4096} {
		w.seed++
		w.run(t, "warm-local", prompt(w.seed, n), 2)
	}
	if err := w.node.svc.SetParams(decode.Params{Policy: decode.PolicyAlwaysRemote}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1024, 8192, 4096} {
		w.seed++
		w.run(t, "warm-remote", prompt(w.seed, n), 2)
	}
	return w
}

func (w *sloSim) run(t *testing.T, id string, p []uint32, max uint32) *decodev1.PrefillDecision {
	t.Helper()
	r := request(id, p, 0, 0, "prefill-0")
	r.MaxTokens = max
	res, err := generate(t, context.Background(), w.node.client, r)
	if err != nil {
		t.Fatal(err)
	}
	return res.decision
}

// check starts, for each case, a sequence of max tokens, waits for its second
// token, and asks for a 16k-token prompt beside it.
func (w *sloSim) check(t *testing.T, cases []sloSimCase) {
	t.Helper()
	for _, tc := range cases {
		w.seed++
		ctx, cancel := context.WithCancel(context.Background())
		r := request("running", prompt(w.seed, 64), 0, 0)
		r.MaxTokens = tc.max
		s, err := w.node.client.Generate(ctx, connect.NewRequest(r))
		if err != nil {
			t.Fatal(err)
		}
		for got := 0; got < 2; {
			if !s.Receive() {
				t.Fatalf("%s ended early: %v", tc.name, s.Err())
			}
			got += len(s.Msg().GetTokenIds())
		}
		w.seed++
		d := w.run(t, "long", prompt(w.seed, 16384), 2)
		cancel()
		_ = s.Close()
		if d.GetPath() != tc.path || d.GetReason() != tc.reason {
			t.Errorf("%s: path %v reason %q, want %v %q (%s)", tc.name, d.GetPath(), d.GetReason(), tc.path, tc.reason, d.GetDetail())
		} else {
			t.Logf("%s: %s", tc.name, d.GetDetail())
		}
	}
}
