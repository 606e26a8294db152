package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/tandem-serve/tandem/bench/enginebench"
)

// runBenchEngine is `tandem bench engine`: the native engine's llama-bench.
func runBenchEngine(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench engine", "bench engine --model FILE [--threads 1,2] [--prompt 512] [--gen 128] [--batch 8] [--reps 3]", stderr)
	o := enginebench.DefaultOptions()
	o.RegisterFlags(fs)
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the measurements to this file (go tool pprof)")
	if _, err := parseBench(fs, args, getenv); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return fmt.Errorf("bench engine: %w", err)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	_, err := enginebench.Run(ctx, o, stdout)
	return err
}

// runBenchMakeModel is `tandem bench make-model`: a GGUF file of a real model's shape
// with random weights, for `tandem bench engine` and for llama-bench on the same file.
func runBenchMakeModel(_ context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench make-model", "bench make-model [--shape smollm2-135m|olmo2-1b|smoke] [--type f32|f16|q8_0|q4_0|q4_k_m] [--seed N] OUT.gguf", stderr)
	shape := fs.String("shape", "smollm2-135m", "model shape: "+strings.Join(enginebench.ShapeNames(), ", "))
	typ := fs.String("type", "q8_0", "weight format: "+strings.Join(enginebench.FileTypes, ", "))
	seed := fs.Uint64("seed", 1, "seed of the random weights")
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("bench make-model: want one output file, got %d arguments", fs.NArg())
	}
	s, err := enginebench.LookupShape(*shape)
	if err != nil {
		return err
	}
	if err := enginebench.WriteModel(fs.Arg(0), s, *typ, *seed); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (%s, %s)\n", fs.Arg(0), s.Name, *typ)
	return nil
}
