package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/tandem-serve/tandem/bench"
	"github.com/tandem-serve/tandem/engine/sim"
)

// runBenchBound prints the work a trace or a mix demands of a sim profile's
// devices, and the load at which it fills them: a capacity no placement policy
// can pass.
func runBenchBound(_ context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench bound", "bench bound (--trace FILE [--trace-start I] [--trace-limit N] [--trace-speedup 1,1.5,2] | --mix SPEC --rate 200,250 [--duration D]) "+
		"[--sim-profile NAME] [--sim-max-batched-tokens N] [--devices 4] [--tbt-slo-ms 100] [--prefix-cache none,unbounded,pool] [--max-utilisation 0.8] [--ttft-slo-ms MS] [--markdown]", stderr)
	var w bench.TraceWindow
	trace := fs.String("trace", "", "the Mooncake-format trace whose demand is priced")
	fs.IntVar(&w.Start, "trace-start", 0, "index of the window's first request (0-based)")
	fs.IntVar(&w.Limit, "trace-limit", 0, "at most this many requests (0: to the end)")
	fs.IntVar(&w.BlockSize, "trace-block-size", bench.DefaultTraceBlockSize, "tokens per hash_ids block (512 in Mooncake's traces)")
	fs.Float64Var(&w.TokenScale, "trace-token-scale", 1, "multiply the block size and every length by this, as bench does")
	speedups := fs.String("trace-speedup", "1", "the loads to price, as multiples of the trace's rate (a list: 1,1.5,2)")
	mixSpec := fs.String("mix", "", "price a mixed workload instead of a trace, as bench's --mix (0.8:64/64,0.2:2048/64); its prompts share no blocks")
	rates := fs.String("rate", "", "with --mix: the loads to price, in requests/s (a list: 200,250,300)")
	window := fs.Duration("duration", 0, "with --mix and --ttft-slo-ms: the length of a run's arrivals, to say up to which rate a run that short "+
		"can end with its backlog answered in time (not a bound)")
	batched := fs.Int("sim-max-batched-tokens", 0, "the tokens a step may hold, as the sim's flag (0: the profile's); a prefill's fixed cost is least in full steps")
	profile := fs.String("sim-profile", "h100-llama8b", "the sim profile whose step model prices the work: "+strings.Join(sim.ProfileNames(), ", "))
	devices := fs.Int("devices", 4, "devices of that profile, however a deployment would split them")
	tbt := fs.Float64("tbt-slo-ms", 100, "the TBT objective a decode step's time must stay within, in ms")
	caches := fs.String("prefix-cache", bench.CacheUnbounded, "prefix reuse to credit, one table each: none; unbounded (every repeated leading block "+
		"of the trace, the most any cache can spare); pool (an LRU of the profile's KV pool per device, a rough guide)")
	ttft := fs.Float64("ttft-slo-ms", 0, "if set, also say up to which speedup the window's work is done by its last arrival plus this TTFT "+
		"(why a short replay can read above the bound; not a bound)")
	maxUtil := fs.Float64("max-utilisation", 1, "also read the speedup at which the demand reaches this share of the devices (queues explode near 1)")
	markdown := fs.Bool("markdown", false, "write the tables as Markdown, for docs/BENCHMARKS.md")
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench bound: unexpected argument %q", fs.Arg(0))
	}
	if (*trace == "") == (*mixSpec == "") {
		return errors.New("bench bound: give --trace FILE or --mix SPEC, one of them")
	}
	if *mixSpec == "" && (*rates != "" || *window != 0) {
		return errors.New("bench bound: --rate and --duration are for --mix; a trace's loads are --trace-speedup")
	}
	if *window < 0 {
		return fmt.Errorf("bench bound: --duration %s must not be negative", *window)
	}
	if *mixSpec != "" {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for _, n := range []string{"trace-start", "trace-limit", "trace-block-size", "trace-token-scale", "trace-speedup"} {
			if set[n] {
				return fmt.Errorf("bench bound: --%s is for --trace; a mix's loads are --rate", n)
			}
		}
		if !set["prefix-cache"] {
			*caches = bench.CacheNone
		}
		if *rates == "" {
			return errors.New("bench bound: --mix needs --rate, the loads to price in requests/s")
		}
		*speedups = *rates
	}
	if !(*maxUtil > 0 && *maxUtil <= 1) {
		return fmt.Errorf("bench bound: --max-utilisation %g must be in (0, 1]", *maxUtil)
	}
	if !(*ttft >= 0) || math.IsInf(*ttft, 0) {
		return fmt.Errorf("bench bound: --ttft-slo-ms %g must be a non-negative number", *ttft)
	}
	xs, err := bench.ParseSpeedups(*speedups)
	if err != nil {
		if *mixSpec != "" {
			return fmt.Errorf("bench bound: --rate %q: want a number, or a comma-separated list of them", *rates)
		}
		return err
	}
	for _, x := range xs {
		if !(x > 0) || math.IsInf(x, 0) {
			if *mixSpec != "" {
				return fmt.Errorf("bench bound: --rate %g must be a positive number", x)
			}
			return fmt.Errorf("bench bound: --trace-speedup %g must be a positive number", x)
		}
	}
	cfg := bench.BoundConfig{Devices: *devices, TBTMS: *tbt, BlockSize: w.ScaledBlockSize()}
	if cfg.Config, err = sim.ConfigFor(*profile, ""); err != nil {
		return fmt.Errorf("bench bound: %w", err)
	}
	if *batched < 0 {
		return fmt.Errorf("bench bound: --sim-max-batched-tokens %d must not be negative", *batched)
	}
	if *batched > 0 {
		cfg.Config.Profile.MaxBatchedTokens = *batched
	}
	var modes []string
	for m := range strings.SplitSeq(*caches, ",") {
		if m = strings.TrimSpace(m); m != "" {
			modes = append(modes, m)
		}
	}
	if len(modes) == 0 {
		return errors.New("bench bound: --prefix-cache is empty")
	}
	for _, m := range modes {
		cfg.Cache = m
		if err := cfg.Validate(); err != nil {
			return err
		}
	}
	var demand func(bench.BoundConfig) (bench.Demand, error)
	if *mixSpec != "" {
		classes, err := bench.ParseMix(*mixSpec)
		if err != nil {
			return err
		}
		demand = func(cfg bench.BoundConfig) (bench.Demand, error) { return bench.MixDemand(classes, cfg) }
	} else {
		reqs, err := bench.ReadTraceWindow(*trace, w)
		if err != nil {
			return err
		}
		demand = func(cfg bench.BoundConfig) (bench.Demand, error) { return bench.ComputeDemand(reqs, cfg) }
	}
	out := bench.BoundOutput{MaxUtil: *maxUtil, TTFTMS: *ttft, WindowMS: float64(*window) / float64(time.Millisecond), Markdown: *markdown}
	for _, m := range modes {
		cfg.Cache = m
		d, err := demand(cfg)
		if err != nil {
			return err
		}
		if err := bench.WriteBound(stdout, d, cfg, xs, out); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(stdout, "Not a prediction: %s.\n", bench.BoundIgnores)
	return err
}
