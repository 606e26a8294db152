package decode

import (
	"github.com/tandem-serve/tandem/decode/estimate"

	"math"
	"testing"
)

func TestDecide(t *testing.T) {
	// th and ld are the threshold and load policies' parameters the cases use.
	th := func(short, queue int) ThresholdParams {
		return ThresholdParams{ShortPrefillThreshold: short, MaxPrefillQueueTokens: queue}
	}
	ld := func(maxTokens int) LoadParams {
		return LoadParams{LocalMaxRunning: 4, LocalMaxKVUsage: 0.5, LocalMaxTokens: maxTokens}
	}
	warm := estimate.Estimate{Warm: true, Local: 0.050, ITLPenalty: 0.010, Remote: 0.030}
	sloP := Params{Policy: PolicySLO, ThresholdParams: th(64, 0), SLOParams: SLOParams{TTFTSLOMs: 2000, TPOTSLOMs: 30}}
	sloFaster := sloP
	sloFaster.SLOPrefer = SLOPreferFaster
	sloEst := func(local, remote float64) estimate.Estimate {
		return estimate.Estimate{Warm: true, LocalWarm: true, RemoteWarm: true, Local: local, LocalPrefill: local, Remote: remote}
	}
	for _, tc := range []struct {
		name   string
		p      Params
		s      situation
		remote bool
		reason string
	}{
		{"aggregated always local", Params{Policy: PolicyAlwaysRemote}, situation{aggregated: true, prompt: 5000}, false, "aggregated_mode"},
		{"short effective", Params{Policy: PolicyThreshold, ThresholdParams: th(64, 0)}, situation{prompt: 64}, false, "below_threshold"},
		{"long effective", Params{Policy: PolicyThreshold, ThresholdParams: th(64, 0)}, situation{prompt: 65}, true, "above_threshold"},
		{"cached prefix makes it short", Params{Policy: PolicyThreshold, ThresholdParams: th(64, 0)}, situation{prompt: 1000, cached: 960}, false,
			"below_threshold"},
		{"always-local", Params{Policy: PolicyAlwaysLocal}, situation{prompt: 9000}, false, "always_local"},
		{"always-remote", Params{Policy: PolicyAlwaysRemote}, situation{prompt: 3}, true, "always_remote"},
		{"cost before warm-up uses the threshold", Params{Policy: PolicyCost, ThresholdParams: th(64, 0)}, situation{prompt: 100, running: 2,
			est: estimate.Estimate{Local: 0, Remote: 9}}, true, "cold_above_threshold"},
		{"cost cold and idle prefills here, to learn", Params{Policy: PolicyCost, ThresholdParams: th(64, 0)}, situation{prompt: 5000,
			est: estimate.Estimate{RemoteWarm: true, Local: 9, Remote: 0.1}}, false, "cost_cold_idle"},
		{"cost with local warm and remote cold uses the threshold, idle or not", Params{Policy: PolicyCost, ThresholdParams: th(64, 0)},
			situation{prompt: 5000, est: estimate.Estimate{LocalWarm: true, Local: 0.01, Remote: 9}}, true, "cold_above_threshold"},
		{"cost picks remote when cheaper", Params{Policy: PolicyCost}, situation{prompt: 100, est: warm}, true, "cost_remote_cheaper"},
		{"cost picks local when cheaper", Params{Policy: PolicyCost}, situation{prompt: 100, est: estimate.Estimate{Warm: true, Local: 0.01, ITLPenalty: 0.005,
			Remote: 0.03}}, false, "cost_local_cheaper"},
		{"full prefill queue keeps it local", Params{Policy: PolicyThreshold, ThresholdParams: th(0, 4096)}, situation{prompt: 500,
			prefillQueued: 5000}, false, "prefill_queue_full"},
		{"queue below the limit", Params{Policy: PolicyThreshold, ThresholdParams: th(0, 4096)}, situation{prompt: 500, prefillQueued: 100}, true,
			"above_threshold"},
		{"load: short stays local", Params{Policy: PolicyLoad, ThresholdParams: th(64, 0), LoadParams: ld(0)},
			situation{prompt: 60, running: 100, kvUsage: 0.9}, false, "below_threshold"},
		{"load: long prefilled here while the batch is small", Params{Policy: PolicyLoad, ThresholdParams: th(64, 0), LoadParams: ld(0)},
			situation{prompt: 5000, running: 4, kvUsage: 0.3}, false, "load_decode_idle"},
		{"load: long goes remote once the batch is big", Params{Policy: PolicyLoad, ThresholdParams: th(64, 0), LoadParams: ld(0)},
			situation{prompt: 5000, running: 5, kvUsage: 0.3}, true, "load_decode_busy"},
		{"load: long goes remote when KV is full, whatever the batch", Params{Policy: PolicyLoad, ThresholdParams: th(64, 0), LoadParams: ld(0)},
			situation{prompt: 5000, running: 1, kvUsage: 0.6}, true, "load_decode_busy"},
		{"load: a long prefill queue keeps it here", Params{Policy: PolicyLoad, ThresholdParams: th(64, 8192), LoadParams: ld(0)},
			situation{prompt: 5000, running: 30, kvUsage: 0.4, prefillQueued: 9000}, false,
			"load_prefill_busy"},
		{"load: ... unless KV here is full", Params{Policy: PolicyLoad, ThresholdParams: th(64, 8192), LoadParams: ld(0)},
			situation{prompt: 5000, running: 30, kvUsage: 0.7, prefillQueued: 9000}, true,
			"load_decode_busy"},
		{"load: too long for a local prefill, however idle", Params{Policy: PolicyLoad, ThresholdParams: th(64, 0), LoadParams: ld(4096)},
			situation{prompt: 5000}, true, "load_too_long"},
		{"load: within the cap", Params{Policy: PolicyLoad, ThresholdParams: th(64, 0), LoadParams: ld(4096)},
			situation{prompt: 5000, cached: 1000}, false, "load_decode_idle"},
		// slo, TTFT SLO 2 s: a stall of est.Local against half the least slack.
		{"slo: cold uses the threshold while something decodes", sloP, situation{prompt: 5000, est: estimate.Estimate{Local: 0.01, Remote: 9},
			slack: estimate.Slack{Decoding: 1, Min: 10}}, true, "slo_cold_above_threshold"},
		{"slo: cold, nothing waiting, one step's prompt: here, to learn", sloP, situation{prompt: 2000,
			est: estimate.Estimate{Local: 0.01, Remote: 9, Chunk: 2048}, slack: estimate.Slack{Decoding: 30, Min: 10}}, false, "slo_cold_learn"},
		{"slo: cold, ... but with prompts waiting here the threshold", sloP, situation{prompt: 2000, localQueued: 100,
			est: estimate.Estimate{Local: 0.01, Remote: 9, Chunk: 2048}, slack: estimate.Slack{Decoding: 30, Min: 10}}, true, "slo_cold_above_threshold"},
		{"slo: cold, ... and a prompt of more than one step too", sloP, situation{prompt: 2049,
			est: estimate.Estimate{Local: 0.01, Remote: 9, Chunk: 2048}, slack: estimate.Slack{Decoding: 30, Min: 10}}, true, "slo_cold_above_threshold"},
		{"slo: cold, short", sloP, situation{prompt: 50, est: estimate.Estimate{Local: 0.01, Remote: 9},
			slack: estimate.Slack{Decoding: 1, Min: 10}}, false, "slo_cold_below_threshold"},
		{"slo: cold and idle prefills here, to learn", sloP, situation{prompt: 5000, est: estimate.Estimate{RemoteWarm: true, Local: 9, Remote: 0.1}},
			false, "slo_cold_idle"},
		{"slo: remote not measured is taken as meeting TTFT", sloP, situation{prompt: 5000, est: estimate.Estimate{LocalWarm: true, Local: 2.5, Remote: 9},
			slack: estimate.Slack{Decoding: 10, Min: 100}}, true, "slo_remote_ttft"},
		{"slo: nothing decoding, TTFT met", sloP, situation{prompt: 5000, est: sloEst(0.3, 0.2)}, false, "slo_local_fits"},
		{"slo: the stall fits half the slack", sloP, situation{prompt: 5000, est: sloEst(0.3, 0.2),
			slack: estimate.Slack{Decoding: 10, Min: 0.7}}, false, "slo_local_fits"},
		{"slo: the stall takes more than half the slack", sloP, situation{prompt: 5000, est: sloEst(0.3, 0.2),
			slack: estimate.Slack{Decoding: 10, Min: 0.5}}, true, "slo_remote_tpot_budget"},
		{"slo: ... even when remote misses its TTFT", sloP, situation{prompt: 5000, est: sloEst(0.3, 5),
			slack: estimate.Slack{Decoding: 10, Min: 0.5}}, true, "slo_remote_tpot_budget"},
		{"slo: sequences that miss an SLO anyway set no budget", sloP, situation{prompt: 5000, est: sloEst(0.3, 0.2),
			slack: estimate.Slack{Decoding: 5, Lost: 3, Min: 0.7}}, false, "slo_local_fits"},
		{"slo: ... but every sequence lost is no licence to stall them further", sloP, situation{prompt: 5000, est: sloEst(0.3, 0.2),
			slack: estimate.Slack{Decoding: 3, Lost: 3, Min: math.Inf(1)}}, true, "slo_remote_tpot_budget"},
		{"slo: cold while lost sequences decode follows the threshold", sloP, situation{prompt: 5000, est: estimate.Estimate{Local: 9, Remote: 0.1},
			slack: estimate.Slack{Decoding: 2, Lost: 2, Min: math.Inf(1)}}, true, "slo_cold_above_threshold"},
		{"slo: local misses TTFT, remote meets it", sloP, situation{prompt: 5000, est: sloEst(2.5, 1.5),
			slack: estimate.Slack{Decoding: 10, Min: 100}}, true, "slo_remote_ttft"},
		{"slo: neither meets TTFT, local keeps TPOT", sloP, situation{prompt: 5000, est: sloEst(2.5, 3),
			slack: estimate.Slack{Decoding: 10, Min: 100}}, false, "slo_local_no_ttft_either"},
		{"slo: remote faster, both miss TTFT: local still spares the pool", sloP, situation{prompt: 5000, est: sloEst(4, 3),
			slack: estimate.Slack{Decoding: 10, Min: 100}}, false, "slo_local_no_ttft_either"},
		// slo_prefer faster: the lower projected TTFT, within the stall budgets.
		{"slo faster: both meet TTFT, remote sooner", sloFaster, situation{prompt: 5000, est: sloEst(1.5, 0.4),
			slack: estimate.Slack{Decoding: 10, Min: 100}}, true, "slo_remote_faster"},
		{"slo faster: both meet TTFT, local sooner", sloFaster, situation{prompt: 5000, est: sloEst(0.3, 0.4),
			slack: estimate.Slack{Decoding: 10, Min: 100}}, false, "slo_local_faster"},
		{"slo faster: the stall budget still comes first", sloFaster, situation{prompt: 5000, est: sloEst(0.3, 0.4),
			slack: estimate.Slack{Decoding: 10, Min: 0.5}}, true, "slo_remote_tpot_budget"},
		{"slo faster: remote not measured yet is taken as this worker's line at its queue", sloFaster, situation{prompt: 5000, prefillQueued: 1000,
			est:   estimate.Estimate{LocalWarm: true, Local: 1.5, Remote: 0.1, LocalLine: estimate.Line{PerToken: 1e-4}},
			slack: estimate.Slack{Decoding: 10, Min: 100}}, true,
			"slo_remote_faster"},
		{"slo faster: ... and a long queue there keeps it here", sloFaster, situation{prompt: 5000, prefillQueued: 20000,
			est:   estimate.Estimate{LocalWarm: true, Local: 1.5, Remote: 0.1, LocalLine: estimate.Line{PerToken: 1e-4}},
			slack: estimate.Slack{Decoding: 10, Min: 100}}, false,
			"slo_local_faster"},
		{"slo ignores the prefill queue limit", Params{Policy: PolicySLO, SLOParams: SLOParams{TTFTSLOMs: 2000, TPOTSLOMs: 30}, ThresholdParams: th(0, 10)},
			situation{prompt: 500, prefillQueued: 5000, est: sloEst(0.3, 0.2), slack: estimate.Slack{Decoding: 1, Min: 0.1}}, true, "slo_remote_tpot_budget"},
		{"always-remote ignores the queue limit", Params{Policy: PolicyAlwaysRemote, ThresholdParams: th(0, 10)}, situation{prompt: 500,
			prefillQueued: 5000}, true, "always_remote"},
	} {
		c := decide(tc.p, tc.s)
		if c.remote != tc.remote || c.reason != tc.reason {
			t.Errorf("%s: remote=%v reason=%q (%s), want remote=%v reason=%q", tc.name, c.remote, c.reason, c.detail, tc.remote, tc.reason)
		}
	}
}

func TestParamsValidate(t *testing.T) {
	for _, bad := range []Params{
		{Policy: "sometimes"},
		{Policy: PolicyThreshold, ThresholdParams: ThresholdParams{ShortPrefillThreshold: -1}},
		{Policy: PolicyCost, CostParams: CostParams{ITLWeight: -0.5}},
		{Policy: PolicyThreshold, ThresholdParams: ThresholdParams{MaxPrefillQueueTokens: -1}},
		{Policy: PolicyLoad, LoadParams: LoadParams{LocalMaxRunning: -1}},
		{Policy: PolicyLoad, LoadParams: LoadParams{LocalMaxTokens: -1}},
		{Policy: PolicyLoad, LoadParams: LoadParams{LocalMaxKVUsage: 1.5}},
		{Policy: PolicySLO, SLOParams: SLOParams{TTFTSLOMs: 0, TPOTSLOMs: 30}},
		{Policy: PolicySLO, SLOParams: SLOParams{TTFTSLOMs: 2000}},
		{Policy: PolicySLO, SLOParams: SLOParams{TTFTSLOMs: 2000, TPOTSLOMs: 0, TBTSLOMs: 0}},
		{Policy: PolicySLO, SLOParams: SLOParams{TTFTSLOMs: 0, TBTSLOMs: 100}},
		{Policy: PolicyThreshold, SLOParams: SLOParams{TBTSLOMs: -1}},
		{Policy: PolicyThreshold, SLOParams: SLOParams{TBTSLOMs: math.NaN()}},
		{Policy: PolicyThreshold, SLOParams: SLOParams{TTFTSLOMs: -1}},
		{Policy: PolicyThreshold, SLOParams: SLOParams{TPOTSLOMs: math.NaN()}},
		{Policy: PolicyThreshold, SLOParams: SLOParams{TPOTSLOMs: math.Inf(1)}},
		{Policy: PolicySLO, SLOParams: SLOParams{TTFTSLOMs: 2000, TPOTSLOMs: 30, SLOPrefer: "quicker"}},
	} {
		if bad.Validate() == nil {
			t.Errorf("%+v validated", bad)
		}
	}
	if err := (Params{Policy: PolicySLO, SLOParams: SLOParams{TTFTSLOMs: 500, TPOTSLOMs: 7.5}}).Validate(); err != nil {
		t.Errorf("good slo params: %v", err)
	}
	if err := (Params{Policy: PolicySLO, SLOParams: SLOParams{TTFTSLOMs: 30000, TBTSLOMs: 100}}).Validate(); err != nil {
		t.Errorf("slo with TBT and no TPOT: %v", err)
	}
	if err := (Params{Policy: PolicyCost, ThresholdParams: ThresholdParams{ShortPrefillThreshold: 256},
		CostParams: CostParams{ITLWeight: 0.25}}).Validate(); err != nil {
		t.Errorf("good params: %v", err)
	}
}
