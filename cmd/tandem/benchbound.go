package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/tandem-serve/tandem/bench"
	"github.com/tandem-serve/tandem/engine/sim"
)

// runBenchBound prints the work a trace demands of a sim profile's devices, and
// the speedup at which it fills them: a capacity no placement policy can pass.
func runBenchBound(_ context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench bound", "bench bound --trace FILE [--trace-start I] [--trace-limit N] [--trace-speedup 1,1.5,2] "+
		"[--sim-profile NAME] [--devices 4] [--tbt-slo-ms 100] [--prefix-cache none,unbounded,pool] [--max-utilisation 0.8] [--ttft-slo-ms MS] [--markdown]", stderr)
	var w bench.TraceWindow
	trace := fs.String("trace", "", "the Mooncake-format trace whose demand is priced")
	fs.IntVar(&w.Start, "trace-start", 0, "index of the window's first request (0-based)")
	fs.IntVar(&w.Limit, "trace-limit", 0, "at most this many requests (0: to the end)")
	fs.IntVar(&w.BlockSize, "trace-block-size", bench.DefaultTraceBlockSize, "tokens per hash_ids block (512 in Mooncake's traces)")
	fs.Float64Var(&w.TokenScale, "trace-token-scale", 1, "multiply the block size and every length by this, as bench does")
	speedups := fs.String("trace-speedup", "1", "the loads to price, as multiples of the trace's rate (a list: 1,1.5,2)")
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
	if *trace == "" {
		return errors.New("bench bound: --trace FILE is required")
	}
	if !(*maxUtil > 0 && *maxUtil <= 1) {
		return fmt.Errorf("bench bound: --max-utilisation %g must be in (0, 1]", *maxUtil)
	}
	if !(*ttft >= 0) || math.IsInf(*ttft, 0) {
		return fmt.Errorf("bench bound: --ttft-slo-ms %g must be a non-negative number", *ttft)
	}
	xs, err := bench.ParseSpeedups(*speedups)
	if err != nil {
		return err
	}
	for _, x := range xs {
		if !(x > 0) || math.IsInf(x, 0) {
			return fmt.Errorf("bench bound: --trace-speedup %g must be a positive number", x)
		}
	}
	cfg := bench.BoundConfig{Devices: *devices, TBTMS: *tbt, BlockSize: w.ScaledBlockSize()}
	if cfg.Config, err = sim.ConfigFor(*profile, ""); err != nil {
		return fmt.Errorf("bench bound: %w", err)
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
	reqs, err := bench.ReadTraceWindow(*trace, w)
	if err != nil {
		return err
	}
	for _, m := range modes {
		cfg.Cache = m
		d, err := bench.ComputeDemand(reqs, cfg)
		if err != nil {
			return err
		}
		if err := bench.WriteBound(stdout, d, cfg, xs, *maxUtil, *ttft, *markdown); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(stdout, "Not a prediction: %s.\n", bench.BoundIgnores)
	return err
}
