package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/tandem-serve/tandem/bench/cluster"
)

// CompareOptions are what tandem bench compare runs the plan against: each
// deployment started afresh as separate processes, every worker pinned to its own
// CPU.
type CompareOptions struct {
	Deployments string
	Workers     int
	WorkerArgs  string
	Pin         bool
	GOMAXPROCS  int
	// Out is the directory for logs and results; "" makes a new temporary one.
	Out    string
	Binary string
	// Shared runs every load of a sweep on one start of each deployment, as
	// compare once did; by default each load gets a fresh start.
	Shared bool
	// CapacityAttainment is the SLO attainment capacity is read at; 0: none.
	CapacityAttainment float64
}

// RegisterFlags registers the comparison's own flags.
func (c *CompareOptions) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Deployments, "deployments", "aggregated,"+strings.Join(cluster.Policies, ","),
		"deployments to compare, each on --workers workers: aggregated (every worker prefills and decodes), a decode policy (one prefill worker, "+
			"the rest decode), POLICY@P (P prefill workers), POLICY@* (every split), POLICY@P+A (A aggregated workers beside), "+
			"SPEC{--decode-flag v}{router: --router-flag v}{aggregated: --lend-prefill}{frontend: --frontend-flag v} "+
			"(POLICY@0+A{aggregated: --lend-prefill}: aggregated workers lend prefill, no prefill worker)")
	fs.IntVar(&c.Workers, "workers", 2, "workers per deployment, one per CPU when pinned")
	fs.StringVar(&c.WorkerArgs, "worker-args", "", "flags for every worker, e.g. '--engine sim' (default: the native engine, model tiny)")
	fs.BoolVar(&c.Pin, "pin", true, "pin each worker to its own CPU with taskset, when taskset is installed")
	fs.IntVar(&c.GOMAXPROCS, "worker-gomaxprocs", 2,
		"GOMAXPROCS of each pinned worker (0: Go's default, 1 on one CPU, which makes a stream's tokens leave in bursts)")
	fs.StringVar(&c.Out, "out", "", "directory for logs, compare.md, results.json and charts (default: a new temporary directory)")
	fs.StringVar(&c.Binary, "binary", "", "tandem executable to start (default: this one)")
	fs.Float64Var(&c.CapacityAttainment, "capacity-attainment", DefaultCapacityAttainment,
		"with a sweep (--rate or --trace-speedup lists) and --slo: read each deployment's capacity, the highest load whose SLO attainment "+
			"(share of requests meeting every objective) is at least this (0: none)")
	fs.BoolVar(&c.Shared, "shared-start", false,
		"run every load of a sweep on one start of each deployment (default: stop and start it again for each load, "+
			"so none inherits another's prefix cache or queues)")
}

// Validate checks what can be checked before the plan is made.
func (c CompareOptions) Validate() error {
	if c.Workers < 2 {
		return errors.New("compare: --workers must be at least 2 (one prefill and one decode worker)")
	}
	if !(c.CapacityAttainment >= 0 && c.CapacityAttainment <= 1) {
		return fmt.Errorf("compare: --capacity-attainment %g must be a share in [0, 1]", c.CapacityAttainment)
	}
	return nil
}

// Compare runs p against each deployment in turn and returns every run, grouped
// by deployment, and the directory it wrote the deployments' logs under. model is
// what to ask each deployment for ("": the one it lists first). A deployment that
// fails to start is reported on stderr and skipped.
func Compare(ctx context.Context, p *Plan, model string, c CompareOptions, stdout, stderr io.Writer) (runs []*Report, out string, err error) {
	if err := c.Validate(); err != nil {
		return nil, "", err
	}
	deps, err := cluster.Parse(c.Deployments, c.Workers)
	if err != nil {
		return nil, "", fmt.Errorf("compare: %w", err)
	}
	opts := cluster.Options{Binary: c.Binary, WorkerArgs: strings.Fields(c.WorkerArgs), GOMAXPROCS: c.GOMAXPROCS}
	if opts.Binary == "" {
		if opts.Binary, err = os.Executable(); err != nil {
			return nil, "", err
		}
	}
	if _, err := exec.LookPath("taskset"); c.Pin && err == nil {
		opts.CPUs = cluster.CPUs()
	}
	if out = c.Out; out == "" {
		if out, err = os.MkdirTemp("", "tandem-bench-compare-"); err != nil {
			return nil, "", err
		}
	}
	opts.LogDir = filepath.Join(out, "logs")
	if err := os.MkdirAll(opts.LogDir, 0o755); err != nil {
		return nil, "", err
	}
	if opts.CPUs != nil {
		fmt.Fprintf(stderr, "compare: pinning worker i to CPU %v[i %% %d] with taskset (GOMAXPROCS=%d); router, frontend and load generator unpinned\n",
			opts.CPUs, len(opts.CPUs), opts.GOMAXPROCS)
	} else {
		fmt.Fprintln(stderr, "compare: not pinning (no taskset, or --pin=false)")
	}
	// Each load of a sweep on a deployment of its own: a later load would
	// otherwise find the earlier one's prompts in the prefix cache (a trace's
	// prompts are the same at every speedup) and start behind its queues.
	batches := [][]int{nil}
	if len(p.Configs) > 1 && !c.Shared {
		batches = batches[:0]
		for i := range p.Configs {
			batches = append(batches, []int{i})
		}
	}
	for _, d := range deps {
		for _, b := range batches {
			if ctx.Err() != nil {
				break
			}
			rs, err := compareOne(ctx, p, model, d, b, opts, stdout, stderr)
			runs = append(runs, rs...)
			if err != nil {
				fmt.Fprintf(stderr, "compare: %s: %v\n", d.Name, err)
			}
		}
	}
	if len(runs) == 0 {
		return nil, out, errors.New("compare: no deployment ran")
	}
	return runs, out, nil
}

// compareOne starts d, runs the plan's configs in indices on it (nil: all) and
// stops it. Each start of a sweep's load logs under a directory of its own, so
// no start overwrites another's logs.
func compareOne(ctx context.Context, p *Plan, model string, d cluster.Deployment, indices []int, opts cluster.Options,
	stdout, stderr io.Writer) ([]*Report, error) {
	what := ""
	if len(indices) == 1 {
		what = " for " + p.Labels[indices[0]] + ", a fresh start"
		opts.LogDir = filepath.Join(opts.LogDir, cluster.LogName(p.Labels[indices[0]]))
		if err := os.MkdirAll(opts.LogDir, 0o755); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(stderr, "compare: starting %s (%d prefill, %d decode, mode %s)%s\n", d.Name, d.Prefill, d.Decode, d.Mode, what)
	cl, err := cluster.Start(ctx, d, opts)
	if err != nil {
		fmt.Fprintf(stderr, "compare: %v; logs in %s\n", err, opts.LogDir)
		return nil, nil
	}
	p.Client.URL, p.Client.Model = cl.URL, model
	if p.Client.Model == "" {
		p.Client.Model, _ = p.Client.DiscoverModel(ctx)
	}
	// The router's gating figures, sampled through the run: the adaptive
	// threshold's moves are seen here or nowhere.
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	var gating *Gating
	if f, ferr := os.Create(filepath.Join(opts.LogDir, cluster.LogName(d.Name)+"-router-gating.txt")); ferr == nil {
		go func() {
			defer close(watched)
			defer f.Close()
			gating = watchRouter(wctx, cl.RouterURL, time.Second, f)
		}()
	} else {
		close(watched)
	}
	rs, err := p.RunConfigs(ctx, indices, d.Name+" ", stdout, stderr)
	stopWatch()
	<-watched
	for _, r := range rs {
		r.Group, r.Gating = d.Name, gating
	}
	if gating != nil && gating.MovesUp+gating.MovesDown > 0 {
		fmt.Fprintf(stdout, "%s router: %s\n", d.Name, gating)
	}
	if serr := cl.Stop(); serr != nil {
		fmt.Fprintf(stderr, "compare: %v\n", serr)
	}
	return rs, err
}
