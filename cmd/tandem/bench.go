package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/tandem-serve/tandem/bench"
	"github.com/tandem-serve/tandem/bench/cluster"
	"github.com/tandem-serve/tandem/bench/plot"
)

// benchOptions are tandem bench's flags, shared by bench compare.
type benchOptions struct {
	url, model, endpoint, apiKey string
	workload, mix, file          string
	isl, osl                     int
	prefixLen, turns, convs      int
	concurrency                  int
	rates                        string
	seed                         uint64
	requests                     int
	duration, warmup, timeout    time.Duration
	slo                          string
	temperature                  float64
	jsonPath, plotsDir           string
	perRequest                   bool
}

func (o *benchOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.url, "url", "http://127.0.0.1:8080", "base URL of any OpenAI-compatible server")
	fs.StringVar(&o.model, "model", "", "model to ask for (default: the first one GET /v1/models lists)")
	fs.StringVar(&o.endpoint, "endpoint", bench.EndpointCompletions, "completions (/v1/completions, exact prompt lengths) or chat (/v1/chat/completions; the chat template adds a few tokens)")
	fs.StringVar(&o.apiKey, "api-key", "", "sent as Authorization: Bearer")
	fs.StringVar(&o.workload, "workload", "fixed", "fixed, mixed, shared-prefix or jsonl")
	fs.IntVar(&o.isl, "isl", 256, "fixed: prompt tokens; shared-prefix: tokens of each new user message")
	fs.IntVar(&o.osl, "osl", 64, "fixed and shared-prefix: output tokens asked for (max_tokens; no ignore_eos)")
	fs.StringVar(&o.mix, "mix", "0.8:64/32,0.2:2048/64", "mixed: weight:ISL/OSL classes, comma-separated, optionally name=weight:ISL/OSL")
	fs.IntVar(&o.prefixLen, "prefix-len", 512, "shared-prefix: tokens of the system prompt every conversation shares")
	fs.IntVar(&o.turns, "turns", 4, "shared-prefix: turns per conversation")
	fs.IntVar(&o.convs, "conversations", 8, "shared-prefix: conversations at a time")
	fs.StringVar(&o.file, "file", "", "jsonl: file of {\"prompt\"|\"messages\", \"max_tokens\"[, \"class\"]} lines")
	fs.IntVar(&o.concurrency, "concurrency", 0, "requests in flight (a closed loop); with --rate, a cap (default 4 without --rate, no cap with it)")
	fs.StringVar(&o.rates, "rate", "", "Poisson arrival rate in requests/s; a list (1,2,4) runs a sweep")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the prompts and the arrival times (a --rate sweep uses seed, seed+1, ... so each rate sends prompts of its own)")
	fs.IntVar(&o.requests, "requests", 0, "requests to measure per run (default 100 without --duration)")
	fs.DurationVar(&o.duration, "duration", 0, "how long to send measured requests per run")
	fs.DurationVar(&o.warmup, "warmup", 0, "period at the start whose requests are not counted")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "longest one request may take")
	fs.StringVar(&o.slo, "slo", "", "goodput objectives in ms, every one must be met: ttft=500,tpot=50[,e2e=MS]")
	fs.Float64Var(&o.temperature, "temperature", -1, "sampling temperature to send (negative: the server's default)")
	fs.StringVar(&o.jsonPath, "json", "", "write the results as JSON to this file")
	fs.StringVar(&o.plotsDir, "plots", "", "write PNG charts to this directory: CDFs of TTFT and ITL, throughput against rate")
	fs.BoolVar(&o.perRequest, "per-request", true, "include every request in the JSON")
}

// benchPlan is what the options resolve to.
type benchPlan struct {
	client  *bench.Client
	configs []bench.Config // one per rate of a sweep
	labels  []string
	newLoad func() (bench.Workload, error)
}

func (o *benchOptions) plan(given map[string]bool) (*benchPlan, error) {
	slo, err := bench.ParseSLO(o.slo)
	if err != nil {
		return nil, err
	}
	base := bench.Config{Concurrency: o.concurrency, Seed: o.seed, Requests: o.requests, Duration: o.duration, Warmup: o.warmup, SLO: slo}
	if base.Requests == 0 && base.Duration == 0 {
		base.Requests = 100
	}
	var rates []float64
	for r := range strings.SplitSeq(o.rates, ",") {
		if r = strings.TrimSpace(r); r == "" {
			continue
		}
		x, err := strconv.ParseFloat(r, 64)
		if err != nil || !(x > 0) {
			return nil, fmt.Errorf("bench: --rate %q: each rate must be a positive number of requests/s", r)
		}
		rates = append(rates, x)
	}
	if len(rates) > 0 && given["concurrency"] && o.concurrency <= 0 {
		return nil, errors.New("bench: --concurrency must be positive")
	}
	p := &benchPlan{}
	if len(rates) == 0 {
		if base.Concurrency == 0 {
			base.Concurrency = 4
		}
		p.configs, p.labels = []bench.Config{base}, []string{fmt.Sprintf("concurrency=%d", base.Concurrency)}
	}
	for i, r := range rates {
		c := base
		c.Rate = r
		// Each rate draws prompts of its own: with one seed for all, a later rate
		// resent the earlier one's prompts, which the server had cached, and measured
		// an easier load (a reviewer saw half the prompt tokens of a compare's 8 req/s
		// run hit the cache). The seed each run used is in its report.
		c.Seed = base.Seed + uint64(i)
		p.configs, p.labels = append(p.configs, c), append(p.labels, fmt.Sprintf("rate=%g", r))
	}
	for _, c := range p.configs {
		if err := c.Validate(); err != nil {
			return nil, err
		}
	}
	prompts, err := bench.CL100KPrompts()
	if err != nil {
		return nil, err
	}
	p.client = &bench.Client{
		URL: o.url, Endpoint: o.endpoint, Model: o.model, APIKey: o.apiKey, Timeout: o.timeout,
		Tokenizer: prompts.Tokenizer(), HTTP: bench.NewHTTPClient(max(o.concurrency, 64)),
	}
	if o.temperature >= 0 {
		t := o.temperature
		p.client.Temperature = &t
	}
	if err := p.client.Validate(); err != nil {
		return nil, err
	}
	p.newLoad, err = o.workloadFactory(prompts)
	if err != nil {
		return nil, err
	}
	_, err = p.newLoad() // reject a bad workload before any request is sent
	return p, err
}

// workloadFactory returns a function that makes a fresh workload, so each run of a
// sweep or comparison starts from the same state.
func (o *benchOptions) workloadFactory(p *bench.Prompts) (func() (bench.Workload, error), error) {
	switch o.workload {
	case "fixed":
		return func() (bench.Workload, error) { return bench.NewFixed(p, o.isl, o.osl) }, nil
	case "mixed":
		classes, err := bench.ParseMix(o.mix)
		if err != nil {
			return nil, err
		}
		return func() (bench.Workload, error) { return bench.NewMixed(p, classes) }, nil
	case "shared-prefix":
		cfg := bench.SharedPrefixConfig{PrefixTokens: o.prefixLen, TurnTokens: o.isl, OutputTokens: o.osl, Turns: o.turns, Conversations: o.convs}
		return func() (bench.Workload, error) { return bench.NewSharedPrefix(p, cfg) }, nil
	case "jsonl":
		if o.file == "" {
			return nil, errors.New("bench: --workload jsonl needs --file")
		}
		return func() (bench.Workload, error) {
			f, err := os.Open(o.file)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			return bench.ReadJSONL(f, p)
		}, nil
	}
	return nil, fmt.Errorf("bench: unknown --workload %q (fixed, mixed, shared-prefix or jsonl)", o.workload)
}

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
	if len(args) > 0 && args[0] == "compare" {
		return runBenchCompare(ctx, args[1:], getenv, stdout, stderr)
	}
	fs := newFlagSet("bench", "bench --url URL [--workload fixed|mixed|shared-prefix|jsonl] [--concurrency N | --rate R[,R...]] [--requests N | --duration D] [flags]\n       tandem bench compare [flags]  (run 'tandem bench compare --help')", stderr)
	var o benchOptions
	o.register(fs)
	given, err := parseBench(fs, args, getenv)
	if err != nil {
		return err
	}
	p, err := o.plan(given)
	if err != nil {
		return err
	}
	if p.client.Model == "" {
		if m, err := p.client.DiscoverModel(ctx); err == nil {
			p.client.Model = m
		} else {
			fmt.Fprintf(stderr, "bench: no --model and %v; sending requests without a model\n", err)
		}
	}
	runs, err := runBenchPlan(ctx, p, "", stdout, stderr)
	if err != nil && len(runs) == 0 {
		return err
	}
	if len(runs) > 1 {
		fmt.Fprintln(stdout, "== sweep")
		bench.WriteComparison(stdout, runs)
	}
	if werr := o.writeOutputs(runs, args, stderr); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// runBenchPlan runs each of the plan's configurations in turn, printing each report as
// it ends. It stops early when ctx ends, returning what it has.
func runBenchPlan(ctx context.Context, p *benchPlan, prefix string, stdout, stderr io.Writer) ([]*bench.Report, error) {
	var runs []*bench.Report
	for i, cfg := range p.configs {
		if ctx.Err() != nil {
			break
		}
		wl, err := p.newLoad()
		if err != nil {
			return runs, err
		}
		label := prefix + p.labels[i]
		if len(p.configs) == 1 && prefix != "" {
			label = strings.TrimSuffix(prefix, " ")
		}
		var bar *bench.Bar
		if benchIsTerminal(stderr) {
			bar = bench.NewBar(stderr, label)
			cfg.Progress = bar.Update
		}
		rep, err := bench.Run(ctx, cfg, wl, p.client)
		if bar != nil {
			bar.Close()
		}
		if err != nil {
			return runs, err
		}
		rep.Label = label
		runs = append(runs, rep)
		if err := rep.WriteTable(stdout); err != nil {
			return runs, err
		}
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "bench: interrupted; the results above are what was measured")
	}
	return runs, nil
}

// benchFile is the JSON output.
type benchFile struct {
	Command []string        `json:"command"`
	Runs    []*bench.Report `json:"runs"`
}

func (o *benchOptions) writeOutputs(runs []*bench.Report, args []string, stderr io.Writer) error {
	var errs []error
	if o.jsonPath != "" {
		errs = append(errs, writeBenchJSON(o.jsonPath, runs, args, o.perRequest))
		if errs[0] == nil {
			fmt.Fprintf(stderr, "bench: wrote %s\n", o.jsonPath)
		}
	}
	if o.plotsDir != "" {
		files, err := plot.Reports(o.plotsDir, runs)
		errs = append(errs, err)
		for _, f := range files {
			fmt.Fprintf(stderr, "bench: wrote %s\n", f)
		}
	}
	return errors.Join(errs...)
}

func writeBenchJSON(path string, runs []*bench.Report, args []string, perRequest bool) error {
	out := benchFile{Command: append([]string{"tandem", "bench"}, args...), Runs: runs}
	if !perRequest {
		out.Runs = make([]*bench.Report, len(runs))
		for i, r := range runs {
			c := *r
			c.Requests = nil
			out.Runs[i] = &c
		}
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// benchIsTerminal reports whether w is a terminal, where a progress bar belongs.
func benchIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// runBenchCompare runs the same workload against each deployment in turn, each
// started afresh as separate processes with every worker pinned to its own CPU.
func runBenchCompare(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench compare", "bench compare [--deployments aggregated,threshold,cost,always-local,always-remote] [--workers 2] [--out DIR] [bench flags]", stderr)
	var o benchOptions
	o.register(fs)
	wf := fs.Lookup("workload")
	_ = wf.Value.Set("mixed")
	wf.DefValue = "mixed"
	deployments := fs.String("deployments", "aggregated,"+strings.Join(cluster.Policies, ","), "deployments to compare: aggregated (every worker prefills and decodes) and the decode policies (one prefill worker, the rest decode)")
	workers := fs.Int("workers", 2, "workers per deployment, one per CPU when pinned")
	workerArgs := fs.String("worker-args", "", "flags for every worker, e.g. '--engine sim' (default: the native engine, model tiny)")
	pin := fs.Bool("pin", true, "pin each worker to its own CPU with taskset, when taskset is installed")
	procs := fs.Int("worker-gomaxprocs", 2, "GOMAXPROCS of each pinned worker (0: Go's default, 1 on one CPU, which makes a stream's tokens leave in bursts)")
	out := fs.String("out", "", "directory for logs, compare.md, results.json and charts (default: a new temporary directory)")
	binary := fs.String("binary", "", "tandem executable to start (default: this one)")
	given, err := parseBench(fs, args, getenv)
	if err != nil {
		return err
	}
	if given["url"] {
		fmt.Fprintln(stderr, "compare: --url is ignored; each deployment is started on loopback")
	}
	if *workers < 2 {
		return errors.New("compare: --workers must be at least 2 (one prefill and one decode worker)")
	}
	p, err := o.plan(given)
	if err != nil {
		return err
	}
	var deps []cluster.Deployment
	for name := range strings.SplitSeq(*deployments, ",") {
		i := slices.IndexFunc(cluster.Standard(*workers), func(d cluster.Deployment) bool { return d.Name == strings.TrimSpace(name) })
		if i < 0 {
			return fmt.Errorf("compare: unknown deployment %q (aggregated, %s)", name, strings.Join(cluster.Policies, ", "))
		}
		deps = append(deps, cluster.Standard(*workers)[i])
	}
	opts := cluster.Options{Binary: *binary, WorkerArgs: strings.Fields(*workerArgs), GOMAXPROCS: *procs}
	if opts.Binary == "" {
		if opts.Binary, err = os.Executable(); err != nil {
			return err
		}
	}
	if _, err := exec.LookPath("taskset"); *pin && err == nil {
		opts.CPUs = cluster.CPUs()
	}
	if *out == "" {
		if *out, err = os.MkdirTemp("", "tandem-bench-compare-"); err != nil {
			return err
		}
	}
	opts.LogDir = filepath.Join(*out, "logs")
	if err := os.MkdirAll(opts.LogDir, 0o755); err != nil {
		return err
	}
	if opts.CPUs != nil {
		fmt.Fprintf(stderr, "compare: pinning worker i to CPU %v[i %% %d] with taskset (GOMAXPROCS=%d); router, frontend and load generator unpinned\n", opts.CPUs, len(opts.CPUs), opts.GOMAXPROCS)
	} else {
		fmt.Fprintln(stderr, "compare: not pinning (no taskset, or --pin=false)")
	}
	var runs []*bench.Report
	for _, d := range deps {
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(stderr, "compare: starting %s (%d prefill, %d decode, mode %s)\n", d.Name, d.Prefill, d.Decode, d.Mode)
		cl, err := cluster.Start(ctx, d, opts)
		if err != nil {
			fmt.Fprintf(stderr, "compare: %v; logs in %s\n", err, opts.LogDir)
			continue
		}
		p.client.URL, p.client.Model = cl.URL, o.model
		if p.client.Model == "" {
			p.client.Model, _ = p.client.DiscoverModel(ctx)
		}
		rs, err := runBenchPlan(ctx, p, d.Name+" ", stdout, stderr)
		for _, r := range rs {
			r.Group = d.Name
		}
		if serr := cl.Stop(); serr != nil {
			fmt.Fprintf(stderr, "compare: %v\n", serr)
		}
		runs = append(runs, rs...)
		if err != nil {
			fmt.Fprintf(stderr, "compare: %s: %v\n", d.Name, err)
		}
	}
	if len(runs) == 0 {
		return errors.New("compare: no deployment ran")
	}
	fmt.Fprintln(stdout, "== comparison")
	bench.WriteComparison(stdout, runs)
	var md strings.Builder
	fmt.Fprintf(&md, "```\ntandem bench compare %s\n```\n\n", strings.Join(args, " "))
	bench.WriteMarkdown(&md, runs)
	werr := os.WriteFile(filepath.Join(*out, "compare.md"), []byte(md.String()), 0o644)
	if o.jsonPath == "" {
		o.jsonPath = filepath.Join(*out, "results.json")
	}
	if o.plotsDir == "" {
		o.plotsDir = *out
	}
	fmt.Fprintf(stderr, "compare: wrote %s\n", filepath.Join(*out, "compare.md"))
	return errors.Join(werr, o.writeOutputs(runs, append([]string{"compare"}, args...), stderr))
}
