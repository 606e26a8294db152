package decode

import (
	"fmt"
	"math"
)

// Policy names how a decode worker chooses between local and remote prefill.
type Policy string

const (
	// PolicyThreshold prefills locally iff the effective length is at most the threshold.
	PolicyThreshold Policy = "threshold"
	// PolicyCost compares estimated TTFT both ways, plus the inter-token latency a
	// local prefill costs the sequences already decoding.
	PolicyCost Policy = "cost"
	// PolicyLoad prefills locally what is short, and also what is long while this
	// worker's decode batch is small enough that a local prefill stalls few
	// sequences, or while the prefill worker's queue is longer than a local
	// prefill: Dynamo's isl_or_load, seen from the decode worker, which knows its
	// own batch and KV exactly.
	PolicyLoad Policy = "load"
	// PolicySLO prefills locally when the stall it inflicts fits within the TPOT
	// budget left to every sequence decoding here, keeps each one's projected TBT
	// within its objective (if set), and its TTFT is met (or beaten nowhere
	// else); remote otherwise (decode/slo.go).
	PolicySLO Policy = "slo"
	// PolicyAlwaysLocal is aggregated serving.
	PolicyAlwaysLocal Policy = "always-local"
	// PolicyAlwaysRemote is plain disaggregation.
	PolicyAlwaysRemote Policy = "always-remote"
)

// Policies lists the valid policy names.
var Policies = []Policy{PolicyThreshold, PolicyCost, PolicyLoad, PolicySLO, PolicyAlwaysLocal, PolicyAlwaysRemote}

// Params are the decision's tunables; they can be replaced at run time.
type Params struct {
	Policy Policy `json:"policy"`
	// ShortPrefillThreshold is the largest effective length prefilled locally under
	// the threshold policy, and under the cost policy before it has measurements.
	ShortPrefillThreshold int `json:"short_prefill_threshold"`
	// ITLWeight converts the stall a local prefill inflicts on each running sequence
	// into seconds of TTFT: 0 ignores running sequences, 1 counts each one's stall
	// as fully as the new request's own wait.
	ITLWeight float64 `json:"itl_weight"`
	// EnforceDisagg turns a failed remote prefill into an error instead of a fallback.
	EnforceDisagg bool `json:"enforce_disagg"`
	// MaxPrefillQueueTokens keeps a prompt local when the best prefill worker
	// already has this many tokens queued (0: no limit), under the threshold and
	// cost policies: a long queue there costs more than a local prefill here.
	MaxPrefillQueueTokens int `json:"max_prefill_queue_tokens"`
	// LocalMaxRunning, under the load policy, prefills a long prompt locally while
	// at most this many sequences decode here: the stall it inflicts is paid by
	// few, and the prefill pool is spared.
	LocalMaxRunning int `json:"local_max_running"`
	// LocalMaxKVUsage, under the load policy, keeps a long prompt remote when this
	// worker's KV pool is fuller than this fraction, whatever its batch: a full
	// pool means long contexts decoding, whose steps a prefill stretches most.
	LocalMaxKVUsage float64 `json:"local_max_kv_usage"`
	// LocalMaxTokens, under the load policy, is the longest effective prompt it
	// prefills locally for load's sake (0: no cap): a prompt of more than one
	// step's token budget stalls the batch for several steps, and the trace's
	// longest (100k tokens) for seconds.
	LocalMaxTokens int `json:"local_max_tokens"`
	// TTFTSLOMs and TPOTSLOMs are the slo policy's objectives, in milliseconds
	// of this worker's clock (a sim engine's modelled time times its time scale):
	// time to first token, and the mean gap between the later tokens.
	TTFTSLOMs float64 `json:"ttft_slo_ms"`
	TPOTSLOMs float64 `json:"tpot_slo_ms"`
	// TBTSLOMs is the slo policy's objective for the Mooncake paper's time
	// between tokens (the mean of a request's longest tenth of gaps), in ms of
	// the same clock; 0 leaves it out. With it set, TPOTSLOMs may be 0 (off):
	// TBT bounds the stalls TPOT averages away.
	TBTSLOMs float64 `json:"tbt_slo_ms"`
	// ShedTTFTFactor refuses a request at once (ResourceExhausted, reason
	// ttft_unmeetable) when its projected TTFT on every path it could take
	// exceeds TTFTSLOMs times this factor, whatever the policy: Mooncake's early
	// rejection. A request that will miss its TTFT anyway is better served by
	// another worker, or by the client's retry, than by a prefill whose work is
	// wasted and whose queueing delays the requests behind it. 0 is off; it
	// never sheds on a path the estimator has not measured (decode/shed.go).
	ShedTTFTFactor float64 `json:"shed_ttft_factor"`
	// SLOPrefer is what the slo policy does with a prompt that both paths would
	// serve within its objectives. SLOPreferLocal (the default; "" is the same)
	// prefills it here while its TTFT is met, keeping the prefill pool for
	// prompts that cannot wait. SLOPreferFaster sends it where its projected
	// TTFT is lower (a prefill worker not yet measured taken to be as fast as
	// this one): the local queue then does not grow towards the objective
	// while prefill workers idle, and what is left of the objective is margin
	// for the estimate's errors.
	SLOPrefer string `json:"slo_prefer"`
}

// The slo policy's preferences (Params.SLOPrefer).
const (
	SLOPreferLocal  = "local"
	SLOPreferFaster = "faster"
)

// DefaultParams are the decision's parameters unless flags or Consul KV say
// otherwise. The threshold, 128, is where a remote prefill starts to cost less
// than a local one once a few sequences decode beside it, with both workers on
// one machine as tandem up runs them.
func DefaultParams() Params {
	// The SLOs are those of ai-dynamo/dynamo's SLA-profiling tests for a
	// long-prompt workload (TTFT 2 s, ITL 30 ms for ISL 4,000 / OSL 1,000).
	return Params{Policy: PolicyThreshold, ShortPrefillThreshold: 128, ITLWeight: 0.25, LocalMaxRunning: 4, LocalMaxKVUsage: 0.5, LocalMaxTokens: 8192,
		TTFTSLOMs: 2000, TPOTSLOMs: 30, SLOPrefer: SLOPreferLocal}
}

// Validate checks the params.
func (p Params) Validate() error {
	valid := false
	for _, q := range Policies {
		valid = valid || p.Policy == q
	}
	if !valid {
		return fmt.Errorf("policy %q: want one of %v", p.Policy, Policies)
	}
	if p.ShortPrefillThreshold < 0 {
		return fmt.Errorf("short_prefill_threshold %d: must not be negative", p.ShortPrefillThreshold)
	}
	if p.MaxPrefillQueueTokens < 0 {
		return fmt.Errorf("max_prefill_queue_tokens %d: must not be negative", p.MaxPrefillQueueTokens)
	}
	if p.LocalMaxRunning < 0 {
		return fmt.Errorf("local_max_running %d: must not be negative", p.LocalMaxRunning)
	}
	if p.LocalMaxTokens < 0 {
		return fmt.Errorf("local_max_tokens %d: must not be negative", p.LocalMaxTokens)
	}
	if !(p.LocalMaxKVUsage >= 0 && p.LocalMaxKVUsage <= 1) {
		return fmt.Errorf("local_max_kv_usage %g: want a fraction in [0, 1]", p.LocalMaxKVUsage)
	}
	for _, slo := range []struct {
		name string
		v    float64
	}{{"ttft_slo_ms", p.TTFTSLOMs}, {"tpot_slo_ms", p.TPOTSLOMs}, {"tbt_slo_ms", p.TBTSLOMs}} {
		if !(slo.v >= 0 && slo.v <= 3.6e6) {
			return fmt.Errorf("%s %g: want milliseconds in [0, 3600000]", slo.name, slo.v)
		}
	}
	if p.Policy == PolicySLO && p.TTFTSLOMs == 0 {
		return fmt.Errorf("ttft_slo_ms: the slo policy needs it above 0")
	}
	if p.Policy == PolicySLO && p.TPOTSLOMs == 0 && p.TBTSLOMs == 0 {
		return fmt.Errorf("tpot_slo_ms, tbt_slo_ms: the slo policy needs at least one of them above 0")
	}
	if !(p.ShedTTFTFactor >= 0 && p.ShedTTFTFactor <= 100) {
		return fmt.Errorf("shed_ttft_factor %g: want 0 (off) or a factor in (0, 100]", p.ShedTTFTFactor)
	}
	if p.ShedTTFTFactor > 0 && p.TTFTSLOMs == 0 {
		return fmt.Errorf("shed_ttft_factor %g: shedding on TTFT needs ttft_slo_ms above 0", p.ShedTTFTFactor)
	}
	switch p.SLOPrefer {
	case "", SLOPreferLocal, SLOPreferFaster:
	default:
		return fmt.Errorf("slo_prefer %q: want %q or %q", p.SLOPrefer, SLOPreferLocal, SLOPreferFaster)
	}
	if p.ITLWeight < 0 || math.IsNaN(p.ITLWeight) || p.ITLWeight > 100 {
		return fmt.Errorf("itl_weight %g: want a number in [0, 100]", p.ITLWeight)
	}
	return nil
}
