package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/tandem-serve/tandem/bench"
	"github.com/tandem-serve/tandem/bench/plot"
)

func parseBench(fs *flag.FlagSet, args []string, getenv func(string) string) (map[string]bool, error) {
	if err := parse(fs, args, getenv); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("bench: unexpected argument %q", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	return given, nil
}

func runBench(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "compare":
			return runBenchCompare(ctx, args[1:], getenv, stdout, stderr)
		case "engine":
			return runBenchEngine(ctx, args[1:], getenv, stdout, stderr)
		case "make-model":
			return runBenchMakeModel(ctx, args[1:], getenv, stdout, stderr)
		case "rescore":
			return runBenchRescore(ctx, args[1:], getenv, stdout, stderr)
		case "bound":
			return runBenchBound(ctx, args[1:], getenv, stdout, stderr)
		}
	}
	fs := newFlagSet("bench", "bench --url URL [--workload fixed|mixed|shared-prefix|jsonl] [--concurrency N | --rate R[,R...]] "+
		"[--requests N | --duration D] [flags]\n       tandem bench --url URL --trace FILE [--trace-speedup X[,X...]] [--trace-token-scale S] "+
		"[--trace-start I] [--trace-limit N] [flags]\n       tandem bench compare [flags]  (run 'tandem bench compare --help')\n"+
		"       tandem bench engine --model FILE [--threads 1,2]  (the native engine's llama-bench)\n"+
		"       tandem bench make-model [--shape S] [--type T] OUT.gguf  (random weights of a real model's shape)\n"+
		"       tandem bench rescore --slo S [--time-scale X] [--capacity-attainment 0.9] RESULTS.json...  (saved runs judged under other objectives, capacity of a sweep)\n"+
		"       tandem bench bound --trace FILE --sim-profile P --devices N [--trace-speedup X,...] [--tbt-slo-ms MS] [--prefix-cache M]  (a capacity no placement policy passes)", stderr)
	var o bench.Options
	o.RegisterFlags(fs)
	given, err := parseBench(fs, args, getenv)
	if err != nil {
		return err
	}
	p, err := o.Plan(given["concurrency"])
	if err != nil {
		return err
	}
	if p.Client.Model == "" {
		if m, err := p.Client.DiscoverModel(ctx); err == nil {
			p.Client.Model = m
		} else {
			fmt.Fprintf(stderr, "bench: no --model and %v; sending requests without a model\n", err)
		}
	}
	runs, err := p.Run(ctx, "", stdout, stderr)
	if err != nil && len(runs) == 0 {
		return err
	}
	if len(runs) > 1 {
		fmt.Fprintln(stdout, "== sweep")
		bench.WriteComparison(stdout, runs)
	}
	if werr := writeOutputs(o, bench.File{Runs: runs, Command: append([]string{"tandem", "bench"}, args...)}, stderr); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// writeOutputs writes the JSON and the charts the options ask for.
func writeOutputs(o bench.Options, f bench.File, stderr io.Writer) error {
	var errs []error
	if o.JSONPath != "" {
		err := f.Write(o.JSONPath, o.PerRequest)
		if err == nil {
			fmt.Fprintf(stderr, "bench: wrote %s\n", o.JSONPath)
		}
		errs = append(errs, err)
	}
	if o.PlotsDir != "" {
		files, err := plot.Reports(o.PlotsDir, f.Runs)
		errs = append(errs, err)
		for _, f := range files {
			fmt.Fprintf(stderr, "bench: wrote %s\n", f)
		}
	}
	return errors.Join(errs...)
}

// runBenchCompare runs the same workload against each deployment in turn.
func runBenchCompare(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench compare",
		"bench compare [--deployments aggregated,threshold,cost,always-local,always-remote] [--workers 2] [--out DIR] [bench flags]", stderr)
	var o bench.Options
	o.RegisterFlags(fs)
	wf := fs.Lookup("workload")
	_ = wf.Value.Set("mixed")
	wf.DefValue = "mixed"
	var c bench.CompareOptions
	c.RegisterFlags(fs)
	given, err := parseBench(fs, args, getenv)
	if err != nil {
		return err
	}
	if given["url"] {
		fmt.Fprintln(stderr, "compare: --url is ignored; each deployment is started on loopback")
	}
	if err := c.Validate(); err != nil {
		return err
	}
	p, err := o.Plan(given["concurrency"])
	if err != nil {
		return err
	}
	runs, out, err := bench.Compare(ctx, p, o.Model, c, stdout, stderr)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "== comparison")
	bench.WriteComparison(stdout, runs)
	capacity, cerr := bench.Capacities(runs, c.CapacityAttainment, 1)
	switch {
	case cerr != nil:
		fmt.Fprintf(stderr, "compare: %v\n", cerr)
	case capacity != nil:
		fmt.Fprintln(stdout, "== capacity")
		bench.WriteCapacity(stdout, capacity)
	case len(p.Configs) > 1 && c.CapacityAttainment > 0:
		fmt.Fprintln(stderr, "compare: no capacity read: a sweep needs --slo to judge its loads by (and --rate or --trace-speedup lists)")
	}
	var md strings.Builder
	fmt.Fprintf(&md, "```\ntandem bench compare %s\n```\n\n", strings.Join(args, " "))
	bench.WriteMarkdown(&md, runs)
	if capacity != nil {
		bench.WriteCapacityMarkdown(&md, capacity)
	}
	werr := os.WriteFile(filepath.Join(out, "compare.md"), []byte(md.String()), 0o644)
	if o.JSONPath == "" {
		o.JSONPath = filepath.Join(out, "results.json")
	}
	if o.PlotsDir == "" {
		o.PlotsDir = out
	}
	fmt.Fprintf(stderr, "compare: wrote %s\n", filepath.Join(out, "compare.md"))
	f := bench.File{Command: append([]string{"tandem", "bench", "compare"}, args...), Runs: runs, Capacity: capacity}
	return errors.Join(werr, writeOutputs(o, f, stderr))
}
