package main

import (
	"context"
	"flag"
	"fmt"
	"io"
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
	var r bench.BoundRun
	fs.StringVar(&r.Trace, "trace", "", "the Mooncake-format trace whose demand is priced")
	fs.IntVar(&r.Window.Start, "trace-start", 0, "index of the window's first request (0-based)")
	fs.IntVar(&r.Window.Limit, "trace-limit", 0, "at most this many requests (0: to the end)")
	fs.IntVar(&r.Window.BlockSize, "trace-block-size", bench.DefaultTraceBlockSize, "tokens per hash_ids block (512 in Mooncake's traces)")
	fs.Float64Var(&r.Window.TokenScale, "trace-token-scale", 1, "multiply the block size and every length by this, as bench does")
	fs.StringVar(&r.Speedups, "trace-speedup", "1", "the loads to price, as multiples of the trace's rate (a list: 1,1.5,2)")
	fs.StringVar(&r.Mix, "mix", "", "price a mixed workload instead of a trace, as bench's --mix (0.8:64/64,0.2:2048/64); its prompts share no blocks")
	fs.StringVar(&r.Rates, "rate", "", "with --mix: the loads to price, in requests/s (a list: 200,250,300)")
	fs.DurationVar(&r.Duration, "duration", 0, "with --mix and --ttft-slo-ms: the length of a run's arrivals, to say up to which rate a run that short "+
		"can end with its backlog answered in time (not a bound)")
	fs.IntVar(&r.MaxBatchedTokens, "sim-max-batched-tokens", 0, "the tokens a step may hold, as the sim's flag (0: the profile's); a prefill's fixed cost is least in full steps")
	fs.StringVar(&r.Profile, "sim-profile", "h100-llama8b", "the sim profile whose step model prices the work: "+strings.Join(sim.ProfileNames(), ", "))
	fs.IntVar(&r.Devices, "devices", 4, "devices of that profile, however a deployment would split them")
	fs.Float64Var(&r.TBTMS, "tbt-slo-ms", 100, "the TBT objective a decode step's time must stay within, in ms")
	fs.StringVar(&r.Caches, "prefix-cache", bench.CacheUnbounded, "prefix reuse to credit, one table each: none; unbounded (every repeated leading block "+
		"of the trace, the most any cache can spare); pool (an LRU of the profile's KV pool per device, a rough guide)")
	fs.Float64Var(&r.TTFTMS, "ttft-slo-ms", 0, "if set, also say up to which speedup the window's work is done by its last arrival plus this TTFT "+
		"(why a short replay can read above the bound; not a bound)")
	fs.Float64Var(&r.MaxUtil, "max-utilisation", 1, "also read the speedup at which the demand reaches this share of the devices (queues explode near 1)")
	markdown := fs.Bool("markdown", false, "write the tables as Markdown, for docs/BENCHMARKS.md")
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench bound: unexpected argument %q", fs.Arg(0))
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "trace-start", "trace-limit", "trace-block-size", "trace-token-scale", "trace-speedup":
			r.TraceSettings = append(r.TraceSettings, f.Name)
		case "prefix-cache":
			r.CachesSet = true
		}
	})
	plan, err := r.Plan()
	if err != nil {
		return err
	}
	cfg := plan.Config
	var demand func(bench.BoundConfig) (bench.Demand, error)
	if r.Mix != "" {
		classes, err := bench.ParseMix(r.Mix)
		if err != nil {
			return err
		}
		demand = func(cfg bench.BoundConfig) (bench.Demand, error) { return bench.MixDemand(classes, cfg) }
	} else {
		reqs, err := bench.ReadTraceWindow(r.Trace, r.Window)
		if err != nil {
			return err
		}
		demand = func(cfg bench.BoundConfig) (bench.Demand, error) { return bench.ComputeDemand(reqs, cfg) }
	}
	out := bench.BoundOutput{MaxUtil: r.MaxUtil, TTFTMS: r.TTFTMS, WindowMS: float64(r.Duration) / float64(time.Millisecond), Markdown: *markdown}
	for _, m := range plan.Caches {
		cfg.Cache = m
		d, err := demand(cfg)
		if err != nil {
			return err
		}
		if err := bench.WriteBound(stdout, d, cfg, plan.Loads, out); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(stdout, "Not a prediction: %s.\n", bench.BoundIgnores)
	return err
}
