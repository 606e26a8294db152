package decode

import (
	"fmt"
	"math"
)

// PolicyName names how a decode worker chooses between local and remote prefill:
// the value of --policy and of Consul KV's "policy".
type PolicyName string

const (
	// PolicyThreshold prefills locally iff the effective length is at most the threshold (threshold.go).
	PolicyThreshold PolicyName = "threshold"
	// PolicyCost compares estimated TTFT both ways, plus the inter-token latency a
	// local prefill costs the sequences already decoding (cost.go).
	PolicyCost PolicyName = "cost"
	// PolicyLoad is Dynamo's isl_or_load, seen from the decode worker (load.go).
	PolicyLoad PolicyName = "load"
	// PolicySLO keeps the TPOT and TBT of the sequences decoding here and the new
	// prompt's TTFT within their objectives (slo.go).
	PolicySLO PolicyName = "slo"
	// PolicyAlwaysLocal is aggregated serving (always.go).
	PolicyAlwaysLocal PolicyName = "always-local"
	// PolicyAlwaysRemote is plain disaggregation (always.go).
	PolicyAlwaysRemote PolicyName = "always-remote"
)

// Policies lists the valid policy names.
var Policies = []PolicyName{PolicyThreshold, PolicyCost, PolicyLoad, PolicySLO, PolicyAlwaysLocal, PolicyAlwaysRemote}

// Policy is one way of deciding a prompt's path. Needs says which of the
// costlier inputs Decide reads, so that the caller builds only those; Decide
// chooses from the situation alone, and says why.
type Policy interface {
	Needs() Needs
	Decide(s situation) choice
}

// Needs are the inputs a policy reads beyond those every decision has (the
// prompt, its cached prefix, this worker's batch, KV and queue, the best prefill
// worker's queue, and the estimate, which shedding and the remote deadline read
// whatever the policy).
type Needs struct {
	// Slack is the TPOT and TBT budget of every sequence decoding here, with the
	// step projections behind it: a walk over the live streams.
	Slack bool
}

// newPolicy is the policy p names, with its parameters. p must be valid.
func newPolicy(p Params) Policy {
	switch p.Policy {
	case PolicyCost:
		return costPolicy{p.ThresholdParams}
	case PolicyLoad:
		return loadPolicy{p.ThresholdParams, p.LoadParams}
	case PolicySLO:
		return sloPolicy{p.ThresholdParams, p.SLOParams}
	case PolicyAlwaysLocal:
		return alwaysLocal{}
	case PolicyAlwaysRemote:
		return alwaysRemote{}
	default:
		return thresholdPolicy{p.ThresholdParams}
	}
}

// Params are the decision's tunables; they can be replaced at run time. Each
// policy's own are a struct of their own, in the policy's file, embedded here so
// that flags and Consul KV name every key flat ({"policy":"slo","ttft_slo_ms":500}),
// as they always have.
type Params struct {
	Policy PolicyName `json:"policy"`
	// EnforceDisagg turns a failed remote prefill into an error instead of a
	// fallback, whatever the policy.
	EnforceDisagg bool `json:"enforce_disagg"`
	ThresholdParams
	CostParams
	LoadParams
	SLOParams
	ShedParams
}

// DefaultParams are the decision's parameters unless flags or Consul KV say
// otherwise; each policy's defaults are beside it.
func DefaultParams() Params {
	return Params{Policy: PolicyThreshold, ThresholdParams: defaultThreshold(), CostParams: defaultCost(), LoadParams: defaultLoad(),
		SLOParams: defaultSLO()}
}

// Validate checks the params: every policy's, whichever is in force, because
// Consul KV may set one policy's before it switches to it.
func (p Params) Validate() error {
	valid := false
	for _, q := range Policies {
		valid = valid || p.Policy == q
	}
	if !valid {
		return fmt.Errorf("policy %q: want one of %v", p.Policy, Policies)
	}
	for _, err := range []error{p.ThresholdParams.Validate(), p.LoadParams.Validate(), p.SLOParams.Validate(), p.ShedParams.Validate(),
		p.CostParams.Validate()} {
		if err != nil {
			return err
		}
	}
	if p.Policy == PolicySLO {
		if err := p.SLOParams.required(); err != nil {
			return err
		}
	}
	if p.ShedTTFTFactor > 0 && p.TTFTSLOMs == 0 {
		return fmt.Errorf("shed_ttft_factor %g: shedding on TTFT needs ttft_slo_ms above 0", p.ShedTTFTFactor)
	}
	return nil
}

// finite checks that a float parameter is a number in [lo, hi].
func finite(v, lo, hi float64) bool { return !math.IsNaN(v) && v >= lo && v <= hi }
