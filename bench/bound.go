package bench

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/tandem-serve/tandem/engine/sim"
)

// A capacity bound: the device time a trace demands, priced with the sim
// profile's own step model at each step's most efficient use, against the
// devices there are. Demand grows in proportion to the speedup, so the speedup
// at which it fills N devices is what no placement policy can serve beyond in
// steady state. It is a ceiling, not a prediction: see BoundIgnores.

// Prefix-cache credit a bound gives the trace's repeated prompt blocks.
const (
	// CacheNone credits nothing: every prompt token is prefilled.
	CacheNone = "none"
	// CacheUnbounded credits each request's leading blocks that any earlier
	// request of the window had: the most any prefix cache can spare.
	CacheUnbounded = "unbounded"
	// CachePool keeps one LRU of the profile's KV pool per device, each request on
	// the device holding most of its prefix: a rough guide to what a cache-aware
	// router with the sim's pools keeps, not a bound.
	CachePool = "pool"
)

// CacheModes lists the --prefix-cache values.
var CacheModes = []string{CacheNone, CacheUnbounded, CachePool}

// BoundIgnores is what a bound leaves out, said with every table so nobody reads
// it as a prediction.
const BoundIgnores = "the bound ignores queueing (it is where utilisation reaches the cap, and queues explode near 1), " +
	"TTFT (prefills run at the best step size, whenever convenient), the KV transfer time of a remote prefill, " +
	"blocks shared by sequences decoding together (each pays for its own), and the prefill/decode interaction (a step holding both is priced as two steps: the 'shared' columns price " +
	"it with every step's fixed cost paid once, the most that interaction can save, and take no TBT toll for it)"

// BoundConfig is what a bound is computed for.
type BoundConfig struct {
	// Config is the sim's device: its profile, KV block size and pool.
	Config  sim.Config
	Devices int
	// TBTMS is the objective a decode step's time must stay within.
	TBTMS float64
	// BlockSize is the trace's block size, after scaling.
	BlockSize int
	Cache     string
}

// Validate checks the configuration.
func (c BoundConfig) Validate() error {
	var errs []error
	if c.Devices < 1 {
		errs = append(errs, fmt.Errorf("bench bound: --devices %d must be at least 1", c.Devices))
	}
	if !(c.TBTMS > 0) || math.IsInf(c.TBTMS, 0) {
		errs = append(errs, fmt.Errorf("bench bound: --tbt-slo-ms %g must be a positive number", c.TBTMS))
	}
	if !slices.Contains(CacheModes, c.Cache) {
		errs = append(errs, fmt.Errorf("bench bound: --prefix-cache %q: want one of %s", c.Cache, strings.Join(CacheModes, ", ")))
	}
	p := c.Config.Profile
	if c.BlockSize < 1 || c.Config.BlockSize < 1 || c.Config.NumBlocks < 1 || p.MaxBatchedTokens < 1 || p.MaxNumSeqs < 1 {
		errs = append(errs, errors.New("bench bound: block sizes, the KV pool and the scheduler's limits must be positive"))
	}
	return errors.Join(errs...)
}

// Demand is the device time a trace window asks for at speedup 1, in
// milliseconds: divided by the window's span it is device-seconds per second.
type Demand struct {
	// Mix is the --mix value the demand was priced from (MixDemand), empty for a
	// trace window.
	Mix      string
	Requests int
	// SpanMS is the window's span at speedup 1, from its first arrival to its last.
	SpanMS float64
	// PromptTokens counts every prompt token; CachedTokens those the cache mode
	// credits; DecodeTokens the tokens decode steps draw (each answer's first
	// token comes from its prefill, as in the sim).
	PromptTokens, CachedTokens, DecodeTokens int
	// PrefillMS and DecodeMS are the two kinds of work; PrefillFixedMS and
	// DecodeFixedMS their steps' fixed parts (the weights read once a step),
	// which a step holding both pays once.
	PrefillMS, DecodeMS           float64
	PrefillFixedMS, DecodeFixedMS float64
	// OverTBT counts the requests whose decode step exceeds the objective even
	// alone; they are priced at a batch of one.
	OverTBT int
}

// TotalMS is the demand with prefill and decode in steps of their own.
func (d Demand) TotalMS() float64 { return d.PrefillMS + d.DecodeMS }

// SharedMS is the demand if every step that could hold both paid its fixed
// cost once: the sum less the smaller of the two fixed parts.
func (d Demand) SharedMS() float64 {
	return d.TotalMS() - min(d.PrefillFixedMS, d.DecodeFixedMS)
}

// ComputeDemand prices reqs (a window at speedup 1) on cfg's device.
func ComputeDemand(reqs []TraceRequest, cfg BoundConfig) (Demand, error) {
	if err := cfg.Validate(); err != nil {
		return Demand{}, err
	}
	if len(reqs) == 0 {
		return Demand{}, errors.New("bench bound: the trace window holds no requests")
	}
	d := Demand{Requests: len(reqs), SpanMS: float64(reqs[len(reqs)-1].At-reqs[0].At) / 1e6}
	if d.SpanMS <= 0 {
		return Demand{}, errors.New("bench bound: every request of the window arrives at once; a rate needs a span of time")
	}
	p := &cfg.Config.Profile
	cache := newBoundCache(cfg)
	for _, r := range reqs {
		if r.Text != "" {
			return Demand{}, fmt.Errorf("bench bound: trace line %d: a text_input prompt has no length without a tokenizer", r.Line)
		}
		cached := cache.credit(r, cfg)
		uncached := r.InputLength - cached
		d.PromptTokens += r.InputLength
		d.CachedTokens += cached
		// A prompt's chunks sum to its unchunked variable time whatever their
		// size; only the step's fixed cost depends on it, least per token in full
		// steps of MaxBatchedTokens.
		fixed := p.StepMS(0, 0, true, 0) * float64(uncached) / float64(p.MaxBatchedTokens)
		d.PrefillMS += p.ChunkMS(cached, uncached) + fixed
		d.PrefillFixedMS += fixed
		tokens := r.OutputLength - 1
		if tokens <= 0 {
			continue
		}
		step, b, ok := bestDecode(cfg, r.InputLength+r.OutputLength)
		if !ok {
			d.OverTBT++
		}
		d.DecodeTokens += tokens
		d.DecodeMS += float64(tokens) * step / b
		d.DecodeFixedMS += float64(tokens) * p.StepMS(1, 0, false, 0) / b
	}
	return d, nil
}

// bestDecode is the decode step of least time per token for sequences of ctx
// tokens: a batch of b like it, each holding the blocks the sim reserves for its
// whole sequence, within the scheduler's limits, the pool and the TBT objective.
// b need not be whole: beside others of other lengths a sequence takes any share
// of a step, and pricing it at a whole batch of its own would overstate a mixed
// batch's cost. ok is false when not even one fits the objective; the step of
// one is returned.
func bestDecode(cfg BoundConfig, ctx int) (stepMS, b float64, ok bool) {
	p := &cfg.Config.Profile
	blocks := float64((ctx + cfg.Config.BlockSize - 1) / cfg.Config.BlockSize)
	pool := float64(cfg.Config.NumBlocks)
	limit := min(float64(p.MaxNumSeqs), float64(p.MaxBatchedTokens), pool/blocks)
	// Whole batches, and the largest the limits allow.
	sizes := []float64{max(1, limit)}
	for n := 1; float64(n) < limit; n++ {
		sizes = append(sizes, float64(n))
	}
	best := math.Inf(1)
	for _, n := range sizes {
		ms := p.StepMS(1, min(1, n*blocks/pool), false, 0)
		if ms > cfg.TBTMS {
			continue
		}
		if per := ms / n; per < best {
			best, stepMS, b, ok = per, ms, n, true
		}
	}
	if !ok {
		return p.StepMS(1, min(1, blocks/pool), false, 0), 1, false
	}
	return stepMS, b, true
}

// ReadTraceWindow reads the trace at path and cuts w out of it at speedup 1
// (a bound scales its demand by the speedup itself).
func ReadTraceWindow(path string, w TraceWindow) ([]TraceRequest, error) {
	w.Speedup = 1
	if err := w.Validate(); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("bench: --trace: %w", err)
	}
	defer f.Close()
	recs, err := ParseTrace(f, w.BlockSize)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return w.Apply(recs)
}
