package decode

import (
	"fmt"
	"math"
	"sync"
	"time"
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
	// PolicyAlwaysLocal is aggregated serving.
	PolicyAlwaysLocal Policy = "always-local"
	// PolicyAlwaysRemote is plain disaggregation.
	PolicyAlwaysRemote Policy = "always-remote"
)

// Policies lists the valid policy names.
var Policies = []Policy{PolicyThreshold, PolicyCost, PolicyLoad, PolicyAlwaysLocal, PolicyAlwaysRemote}

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
}

// DefaultParams are the decision's parameters unless flags or Consul KV say
// otherwise; docs/BENCHMARKS.md ("Short-prefill threshold") says how the
// threshold's was chosen.
func DefaultParams() Params {
	return Params{Policy: PolicyThreshold, ShortPrefillThreshold: 128, ITLWeight: 0.25, LocalMaxRunning: 4, LocalMaxKVUsage: 0.5, LocalMaxTokens: 8192}
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
	if p.ITLWeight < 0 || math.IsNaN(p.ITLWeight) || p.ITLWeight > 100 {
		return fmt.Errorf("itl_weight %g: want a number in [0, 100]", p.ITLWeight)
	}
	return nil
}

// ewma is an exponentially weighted mean that knows how many samples it has seen.
type ewma struct {
	value float64
	n     int
}

func (e *ewma) add(x float64) {
	if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
		return
	}
	const alpha = 0.2
	if e.n == 0 {
		e.value = x
	} else {
		e.value += alpha * (x - e.value)
	}
	e.n++
}

// warm is how many samples each coefficient needs before the cost policy trusts it.
const warm = 3

// Estimator learns, from this worker's own measurements, how long prefill takes
// here and remotely and how fast KV crosses the link.
type Estimator struct {
	mu            sync.Mutex
	localPerToken ewma // seconds per computed prompt token, local
	remotePerTok  ewma // seconds per computed prompt token, on prefill workers
	bandwidth     ewma // KV bytes per second, prefill worker to here
	overhead      ewma // seconds of a remote prefill not explained by the rest
}

// Safe defaults before warm-up, used only to bound deadlines: generous enough that
// a healthy prefill is never cut off while the estimator learns.
const (
	defaultPerToken  = 2e-3 // 500 tokens/s
	defaultBandwidth = 50e6 // 50 MB/s
	defaultOverhead  = 0.05
)

func (e *Estimator) get(m *ewma, def float64) float64 {
	if m.n == 0 {
		return def
	}
	return m.value
}

// ObserveLocal records a local prefill of tokens computed tokens that took d.
func (e *Estimator) ObserveLocal(tokens int, d time.Duration) {
	if tokens < 16 {
		return // too short to say anything about per-token speed
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.localPerToken.add(d.Seconds() / float64(tokens))
}

// ObserveRemote records a remote prefill: tokens computed there in prefill time,
// bytes moved in transfer time, and the total seen from here.
func (e *Estimator) ObserveRemote(tokens int, prefill time.Duration, bytes int, transfer, total time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if tokens >= 16 {
		e.remotePerTok.add(prefill.Seconds() / float64(tokens))
	}
	if bytes > 0 && transfer > 0 {
		e.bandwidth.add(float64(bytes) / transfer.Seconds())
	}
	e.overhead.add(max(0, (total - prefill - transfer).Seconds()))
}

// Estimate is the predicted cost of each path, in seconds.
type Estimate struct {
	Warm        bool
	Local       float64 // local queue + local prefill
	ITLPenalty  float64 // weighted stall of the running sequences
	Remote      float64 // remote queue + remote prefill + transfer + overhead
	RemoteQueue float64
}

// Estimate predicts both paths for effective tokens to compute, kvBytes to move,
// and the queues on each side.
func (e *Estimator) Estimate(effective, kvBytes, localQueuedTokens, remoteQueuedTokens, running int, itlWeight float64) Estimate {
	e.mu.Lock()
	defer e.mu.Unlock()
	lp := e.get(&e.localPerToken, defaultPerToken)
	rp := e.get(&e.remotePerTok, defaultPerToken)
	bw := e.get(&e.bandwidth, defaultBandwidth)
	oh := e.get(&e.overhead, defaultOverhead)
	local := float64(localQueuedTokens+effective) * lp
	est := Estimate{
		// An engine that moves KV itself (a handoff by reference) reports no bytes:
		// its transfer time is in the measured overhead, and no bandwidth is ever
		// learnt, nor needed.
		Warm:        e.localPerToken.n >= warm && e.remotePerTok.n >= warm && (e.bandwidth.n >= warm || kvBytes == 0),
		Local:       local,
		ITLPenalty:  itlWeight * float64(running) * float64(effective) * lp,
		RemoteQueue: float64(remoteQueuedTokens) * rp,
	}
	est.Remote = est.RemoteQueue + float64(effective)*rp + float64(kvBytes)/bw + oh
	return est
}

// RemoteDeadline bounds a remote prefill: a multiple of its estimate, never less
// than lo nor more than hi, so a slow worker is abandoned but a healthy one is not.
func RemoteDeadline(est Estimate, lo, hi time.Duration) time.Duration {
	d := time.Duration((3*est.Remote + 1) * float64(time.Second))
	return min(max(d, lo), hi)
}
