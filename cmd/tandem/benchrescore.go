package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/tandem-serve/tandem/bench"
)

// runBenchRescore judges saved runs again under other objectives: one trace
// replay, read under Dynamo's SLOs and under the Mooncake paper's.
func runBenchRescore(_ context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench rescore", "bench rescore --slo ttft=MS[,tpot=MS][,tbt=MS][,e2e=MS] [--time-scale X] [--capacity-attainment 0.9] [--markdown] RESULTS.json...", stderr)
	sloFlag := fs.String("slo", "", "objectives in ms, every one must be met (tbt: the Mooncake paper's, the mean of a request's longest tenth of gaps)")
	timeScale := fs.Float64("time-scale", 1, "the sim's --sim-time-scale of the runs: latencies and windows are divided by it, so objectives and tables are in modelled time")
	attainment := fs.Float64("capacity-attainment", bench.DefaultCapacityAttainment,
		"read each deployment's capacity, the highest load whose SLO attainment is at least this; runs of one deployment name from "+
			"several files join one curve; loads are multiplied by --time-scale (0: no capacity)")
	markdown := fs.Bool("markdown", false, "write the table as Markdown, for docs/BENCHMARKS.md")
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("bench rescore: give one or more results files (compare's results.json, or bench --json)")
	}
	slo, err := bench.ParseSLO(*sloFlag)
	if err != nil {
		return err
	}
	if !slo.Set() {
		return errors.New("bench rescore: --slo is required (e.g. ttft=2000,tpot=25)")
	}
	var runs []*bench.Report
	for _, path := range fs.Args() {
		f, err := bench.ReadFile(path)
		if err != nil {
			return err
		}
		rs, err := bench.Rescore(f, slo, *timeScale)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		runs = append(runs, rs...)
	}
	capacity, err := bench.Capacities(runs, *attainment, *timeScale)
	if err != nil {
		return err
	}
	if capacity == nil && *attainment > 0 {
		fmt.Fprintln(stderr, "bench rescore: no capacity read: no deployment has runs at two loads or more (a --rate or --trace-speedup sweep)")
	}
	if *markdown {
		if err := bench.WriteMarkdown(stdout, runs); err != nil || capacity == nil {
			return err
		}
		return bench.WriteCapacityMarkdown(stdout, capacity)
	}
	if err := bench.WriteComparison(stdout, runs); err != nil || capacity == nil {
		return err
	}
	fmt.Fprintln(stdout, "\n== capacity")
	return bench.WriteCapacity(stdout, capacity)
}
