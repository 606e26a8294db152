package bench

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/tandem-serve/tandem/engine/sim"
)

// BoundRun is what `tandem bench bound` prices: a trace's window or a synthetic
// mix, at the loads given, on a sim profile's devices. Its fields are the
// command's flags; Plan checks them together and resolves what they mean.
type BoundRun struct {
	Trace    string
	Window   TraceWindow
	Speedups string // the trace's loads, as multiples of its rate (a list)
	Mix      string // a mix instead of a trace, as bench's --mix
	Rates    string // the mix's loads, in requests/s (a list)
	// Duration is a mix run's length of arrivals, for the backlog guide.
	Duration         time.Duration
	Profile          string
	MaxBatchedTokens int // 0: the profile's
	Devices          int
	TBTMS            float64
	Caches           string // prefix reuse modes, a list
	TTFTMS           float64
	MaxUtil          float64
	// TraceSettings names the trace-only settings given explicitly, which a mix
	// refuses; CachesSet says Caches was given (a mix's default is none).
	TraceSettings []string
	CachesSet     bool
}

// BoundPlan is a checked BoundRun: the loads and the configuration for each
// prefix reuse mode.
type BoundPlan struct {
	Loads  []float64
	Config BoundConfig
	Caches []string
}

// Plan checks the run's settings together and resolves them, with an error that
// names the flag at fault.
func (r BoundRun) Plan() (BoundPlan, error) {
	var p BoundPlan
	mix := r.Mix != ""
	switch {
	case (r.Trace == "") == !mix:
		return p, errors.New("bench bound: give --trace FILE or --mix SPEC, one of them")
	case !mix && (r.Rates != "" || r.Duration != 0):
		return p, errors.New("bench bound: --rate and --duration are for --mix; a trace's loads are --trace-speedup")
	case r.Duration < 0:
		return p, fmt.Errorf("bench bound: --duration %s must not be negative", r.Duration)
	case mix && len(r.TraceSettings) > 0:
		return p, fmt.Errorf("bench bound: --%s is for --trace; a mix's loads are --rate", r.TraceSettings[0])
	case mix && r.Rates == "":
		return p, errors.New("bench bound: --mix needs --rate, the loads to price in requests/s")
	case !(r.MaxUtil > 0 && r.MaxUtil <= 1):
		return p, fmt.Errorf("bench bound: --max-utilisation %g must be in (0, 1]", r.MaxUtil)
	case !(r.TTFTMS >= 0) || math.IsInf(r.TTFTMS, 0):
		return p, fmt.Errorf("bench bound: --ttft-slo-ms %g must be a non-negative number", r.TTFTMS)
	case r.MaxBatchedTokens < 0:
		return p, fmt.Errorf("bench bound: --sim-max-batched-tokens %d must not be negative", r.MaxBatchedTokens)
	}
	loads, caches := r.Speedups, r.Caches
	if mix {
		loads = r.Rates
		if !r.CachesSet {
			caches = CacheNone
		}
	}
	xs, err := ParseSpeedups(loads)
	if err != nil {
		if mix {
			return p, fmt.Errorf("bench bound: --rate %q: want a number, or a comma-separated list of them", r.Rates)
		}
		return p, err
	}
	for _, x := range xs {
		if !(x > 0) || math.IsInf(x, 0) {
			if mix {
				return p, fmt.Errorf("bench bound: --rate %g must be a positive number", x)
			}
			return p, fmt.Errorf("bench bound: --trace-speedup %g must be a positive number", x)
		}
	}
	p.Loads = xs
	p.Config = BoundConfig{Devices: r.Devices, TBTMS: r.TBTMS, BlockSize: r.Window.ScaledBlockSize()}
	if p.Config.Config, err = sim.ConfigFor(r.Profile, ""); err != nil {
		return p, fmt.Errorf("bench bound: %w", err)
	}
	if r.MaxBatchedTokens > 0 {
		p.Config.Config.Profile.MaxBatchedTokens = r.MaxBatchedTokens
	}
	for m := range strings.SplitSeq(caches, ",") {
		if m = strings.TrimSpace(m); m != "" {
			p.Caches = append(p.Caches, m)
		}
	}
	if len(p.Caches) == 0 {
		return p, errors.New("bench bound: --prefix-cache is empty")
	}
	for _, m := range p.Caches {
		cfg := p.Config
		cfg.Cache = m
		if err := cfg.Validate(); err != nil {
			return p, err
		}
	}
	return p, nil
}
