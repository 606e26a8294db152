package router

import (
	"fmt"
	"math"
)

// Params are the routing tunables. They come from flags and can be replaced at run
// time (Consul KV) with SetParams.
type Params struct {
	// PrefillWeight scales a candidate's uncached prompt blocks against its active
	// decode blocks: how much a block of prefill work counts relative to a block of
	// KV being decoded.
	PrefillWeight float64 `json:"prefill_weight"`
	// QueueWeight scales the blocks waiting to be prefilled on a worker, plus those
	// the router sent it since its last load report.
	QueueWeight float64 `json:"queue_weight"`
	// Temperature of the softmax over normalised costs; 0 picks the cheapest, with
	// ties broken at random.
	Temperature float64 `json:"temperature"`

	// ISLGate turns on threshold gating by worker mode.
	ISLGate bool `json:"isl_gate"`
	// ISLThreshold, in effective prompt tokens (prompt minus the best cached prefix):
	// below it only workers that prefill locally are scored, at or above it only
	// disaggregated decode workers.
	//
	// It is not the decode worker's short_prefill_threshold, and the two differ
	// on purpose. This one picks which pool may serve a prompt, before any worker
	// is chosen, on the best prefix any decode worker holds; its default is
	// Dynamo's 1024, and --isl-adaptive learns it from the two pools' costs. The
	// decode worker's (128 by default, measured in
	// docs/results/2026-11-30-short-prefill-threshold.md) decides, on the worker
	// chosen and on the prefix that worker holds, whether its own prefill costs
	// less than a remote one. A prompt between the two goes to the pool that
	// prefills locally; if it lands on a decode worker of the threshold policy
	// (a member of both pools) that worker may still send it away, and says so
	// in its decision. For one boundary everywhere set this one a token above
	// the decode worker's: this is the first long length, that the last short one.
	ISLThreshold int `json:"isl_threshold"`
	// ISLAdaptive nudges ISLThreshold within [ISLMin, ISLMax] by comparing the two
	// classes' best costs: the disaggregated class's plus the least prefill queue
	// term among the prefill workers (where its prompts wait), the local class's
	// plus the stall its prefill inflicts on the sequences it decodes
	// (ISLITLWeight).
	ISLAdaptive bool `json:"isl_adaptive"`
	ISLMin      int  `json:"isl_min"`
	ISLMax      int  `json:"isl_max"`
	// ISLStep is how far one adaptive move goes, in tokens.
	ISLStep int `json:"isl_step"`
	// ISLMargin is the cost difference that counts as evidence for a move; smaller
	// differences are noise.
	ISLMargin float64 `json:"isl_margin"`
	// ISLHysteresis is how many consecutive requests must agree before a move.
	ISLHysteresis int `json:"isl_hysteresis"`
	// ISLITLWeight prices, in the adaptive comparison, the stall a local prefill
	// inflicts on the sequences decoding beside it: the local class's best worker
	// costs ISLITLWeight x its running sequences x the prompt's uncached blocks x
	// PrefillWeight more (each running sequence waits as long as the prefill takes).
	// 0 ignores them, 1 counts each one's stall as fully as the new request's own
	// wait; the default is the decode workers' --itl-weight default.
	ISLITLWeight float64 `json:"isl_itl_weight"`

	// LendersPrefillFirst makes a lender (an aggregated worker with
	// --lend-prefill) a decode candidate only while its prefill service holds no
	// prompt for a decode worker (Load.lent_waiting_tokens is 0): a device that
	// would otherwise be parked in a prefill-only role decodes when it has nothing
	// to lend, and stops taking new sequences as soon as it has. Nor does it
	// decode a prompt whose part it does not hold reaches the ISL threshold (in
	// force): short for a decode worker holding its prefix, such a prompt is long
	// for the lender. Meant with ISLGate, so that only short prompts reach it.
	LendersPrefillFirst bool `json:"lenders_prefill_first"`
}

// DefaultParams are Dynamo's defaults for the cost (scale 1, temperature 0), gating
// off, and the seed's threshold of 1024 tokens.
func DefaultParams() Params {
	return Params{
		PrefillWeight: 1, QueueWeight: 1, Temperature: 0,
		ISLThreshold: 1024, ISLMin: 64, ISLMax: 8192, ISLStep: 64, ISLMargin: 4, ISLHysteresis: 16,
		ISLITLWeight: 0.25,
	}
}

// Validate checks every field, naming the first that is wrong.
func (p Params) Validate() error {
	finite := func(name string, v, lo, hi float64) error {
		if math.IsNaN(v) || v < lo || v > hi {
			return fmt.Errorf("%s %g: want a number in [%g, %g]", name, v, lo, hi)
		}
		return nil
	}
	for _, err := range []error{
		finite("prefill_weight", p.PrefillWeight, 0, 1e6),
		finite("queue_weight", p.QueueWeight, 0, 1e6),
		finite("temperature", p.Temperature, 0, 100),
		finite("isl_margin", p.ISLMargin, 0, 1e9),
		finite("isl_itl_weight", p.ISLITLWeight, 0, 100),
	} {
		if err != nil {
			return err
		}
	}
	switch {
	case p.ISLThreshold < 0:
		return fmt.Errorf("isl_threshold %d: must not be negative", p.ISLThreshold)
	case p.ISLMin < 0 || p.ISLMax < p.ISLMin:
		return fmt.Errorf("isl_min %d, isl_max %d: want 0 <= min <= max", p.ISLMin, p.ISLMax)
	case p.ISLAdaptive && (p.ISLThreshold < p.ISLMin || p.ISLThreshold > p.ISLMax):
		return fmt.Errorf("isl_threshold %d: outside [isl_min %d, isl_max %d]", p.ISLThreshold, p.ISLMin, p.ISLMax)
	case p.ISLStep < 1:
		return fmt.Errorf("isl_step %d: must be at least 1", p.ISLStep)
	case p.ISLHysteresis < 1:
		return fmt.Errorf("isl_hysteresis %d: must be at least 1", p.ISLHysteresis)
	}
	return nil
}
