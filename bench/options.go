package bench

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tandem-serve/tandem/kvcache/blockhash"
)

// Options are what tandem bench is asked to do: the server, the workload, the load
// and the outputs.
type Options struct {
	URL, Model, Endpoint, APIKey string
	Workload, Mix, File          string
	ISL, OSL                     int
	PrefixLen, Turns, Convs      int
	Concurrency                  int
	// Rates is a comma-separated list of arrival rates; more than one is a sweep.
	Rates                     string
	Seed                      uint64
	Requests                  int
	Duration, Warmup, Timeout time.Duration
	SLO                       string
	// Temperature is sent when not negative.
	Temperature        float64
	JSONPath, PlotsDir string
	PerRequest         bool
	// Trace is a Mooncake-format trace to replay; TraceWindow says which part
	// and how.
	Trace       string
	TraceWindow TraceWindow
	// TraceSpeedups is a comma-separated list of trace speedups; more than one
	// is a sweep (TraceWindow.Speedup is set from each in turn).
	TraceSpeedups string
	// TraceIgnoreEOS sends ignore_eos with each request of a trace.
	TraceIgnoreEOS bool
	// IgnoreEOS sends ignore_eos with each request of the fixed and mixed workloads.
	IgnoreEOS bool
	// Phases is a shifting workload (ParsePhases); PhasesScales is a
	// comma-separated list of multipliers of its rates, more than one a sweep.
	Phases, PhasesScales string
}

// RegisterFlags registers the options' flags, with their defaults.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.URL, "url", "http://127.0.0.1:8080", "base URL of any OpenAI-compatible server")
	fs.StringVar(&o.Model, "model", "", "model to ask for (default: the first one GET /v1/models lists)")
	fs.StringVar(&o.Endpoint, "endpoint", EndpointCompletions,
		"completions (/v1/completions, exact prompt lengths) or chat (/v1/chat/completions; the chat template adds a few tokens)")
	fs.StringVar(&o.APIKey, "api-key", "", "sent as Authorization: Bearer")
	fs.StringVar(&o.Workload, "workload", "fixed", "fixed, mixed, shared-prefix, jsonl or trace (--trace FILE sets it)")
	fs.IntVar(&o.ISL, "isl", 256, "fixed: prompt tokens; shared-prefix: tokens of each new user message")
	fs.IntVar(&o.OSL, "osl", 64, "fixed and shared-prefix: output tokens asked for (max_tokens; no ignore_eos)")
	fs.BoolVar(&o.IgnoreEOS, "ignore-eos", false,
		"fixed and mixed: send ignore_eos so each answer is exactly its OSL (the report counts answers that ended early either way)")
	fs.StringVar(&o.Mix, "mix", "0.8:64/32,0.2:2048/64", "mixed: weight:ISL/OSL classes, comma-separated, optionally name=weight:ISL/OSL")
	fs.IntVar(&o.PrefixLen, "prefix-len", 512, "shared-prefix: tokens of the system prompt every conversation shares")
	fs.IntVar(&o.Turns, "turns", 4, "shared-prefix: turns per conversation")
	fs.IntVar(&o.Convs, "conversations", 8, "shared-prefix: conversations at a time")
	fs.StringVar(&o.File, "file", "", "jsonl: file of {\"prompt\"|\"messages\", \"max_tokens\"[, \"class\"]} lines")
	fs.IntVar(&o.Concurrency, "concurrency", 0, "requests in flight (a closed loop); with --rate, a cap (default 4 without --rate, no cap with it)")
	fs.StringVar(&o.Rates, "rate", "", "Poisson arrival rate in requests/s; a list (1,2,4) runs a sweep")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the prompts and the arrival times (a --rate sweep uses seed, seed+1, ... so each rate sends prompts of its own)")
	fs.IntVar(&o.Requests, "requests", 0, "requests to measure per run (default 100 without --duration)")
	fs.DurationVar(&o.Duration, "duration", 0, "how long to send measured requests per run")
	fs.DurationVar(&o.Warmup, "warmup", 0, "period at the start whose requests are not counted")
	fs.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "longest one request may take")
	fs.StringVar(&o.SLO, "slo", "", "goodput objectives in ms, every one must be met: ttft=500,tpot=50[,e2e=MS]")
	fs.Float64Var(&o.Temperature, "temperature", -1, "sampling temperature to send (negative: the server's default)")
	fs.StringVar(&o.JSONPath, "json", "", "write the results as JSON to this file")
	fs.StringVar(&o.PlotsDir, "plots", "", "write PNG charts to this directory: CDFs of TTFT and ITL, throughput against rate")
	fs.BoolVar(&o.PerRequest, "per-request", true, "include every request in the JSON")
	fs.StringVar(&o.Trace, "trace", "",
		"replay a Mooncake-format JSONL trace, or windows of several one after the other (FILE@START+LIMIT,FILE@START+LIMIT; "+
			"each window's block ids kept apart from the others'); each line (timestamp ms, input_length, output_length, hash_ids; AIPerf's mooncake_trace, "+
			"whose text_input, session_id and delay are read too): "+
			"each request at its timestamp, prompts of the served model's tokens with equal hash_ids as identical blocks, "+
			"output_length enforced with ignore_eos (completions endpoint only)")
	fs.IntVar(&o.TraceWindow.BlockSize, "trace-block-size", DefaultTraceBlockSize, "trace: tokens per hash_ids block (512 in Mooncake's traces)")
	fs.StringVar(&o.TraceSpeedups, "trace-speedup", "1",
		"trace: divide the gaps between arrivals by this (2 replays twice as fast); a list (1,1.5,2) runs a sweep, one load per value")
	fs.Float64Var(&o.TraceWindow.TokenScale, "trace-token-scale", 1,
		"trace: multiply the block size and every length by this (0.0625: blocks of 32 tokens) for engines that cannot take the trace's lengths; "+
			"the blocks each prompt shares stay shared")
	fs.BoolVar(&o.TraceIgnoreEOS, "trace-ignore-eos", true,
		"trace: send ignore_eos so each answer is exactly output_length tokens; false leaves only max_tokens (for a server without it), "+
			"and the report counts the answers that ended early")
	fs.IntVar(&o.TraceWindow.KVBlockSize, "trace-kv-block-size", blockhash.DefaultBlockSize,
		"trace: the servers' KV block size (tandem's --block-size), to warn when the scaled trace blocks are not whole KV blocks (0: no check)")
	fs.StringVar(&o.Phases, "phases", "",
		"a shifting workload, phases one after the other, each DURATION:MIX@RATE with MIX weight:ISL/OSL classes joined by '+' "+
			"(60s:0.95:64/64@900,60s:0.2:64/64+0.8:4096/128@40); the report shows each phase's classes as pN ISL/OSL")
	fs.StringVar(&o.PhasesScales, "phases-scale", "1",
		"phases: multiply every phase's rate by this; a list (0.5,1,1.5) runs a sweep, one load per value, whose capacity compare reads in these units")
	fs.IntVar(&o.TraceWindow.Start, "trace-start", 0, "trace: index of the first request to replay (0-based, blank lines not counted)")
	fs.IntVar(&o.TraceWindow.Limit, "trace-limit", 0, "trace: replay at most this many requests (0: to the end; --requests caps it too)")
}

// Plan is what the options resolve to: a client, and one run per rate of a sweep.
type Plan struct {
	Client  *Client
	Configs []Config
	Labels  []string
	// NewLoad makes a fresh workload, so each run of a sweep or comparison starts
	// from the same state.
	NewLoad func() (Workload, error)
	// loadAt, when set, makes the workload of config i, for sweeps whose loads
	// differ in the workload itself (a trace at several speedups); else every
	// config takes NewLoad's.
	loadAt func(i int) (Workload, error)
	// Warnings are said on stderr before the runs (and by the workload in each
	// report).
	Warnings []string

	// base builds prompts in cl100k tokens; prompts is what NewLoad builds with:
	// base until Run sizes them in the served model's tokens. base is nil for
	// workloads whose prompts are not built here (a file, a trace).
	base, prompts *Prompts
	// said are the lines the plan's runs have written to stderr (once).
	said map[string]bool
}

// Plan checks the options and resolves them. concurrencyGiven says whether
// --concurrency was set: with --rate, 0 is then an error rather than "no cap".
func (o *Options) Plan(concurrencyGiven bool) (*Plan, error) {
	slo, err := ParseSLO(o.SLO)
	if err != nil {
		return nil, err
	}
	if o.Trace != "" {
		return o.tracePlan(slo)
	}
	if o.Phases != "" || o.Workload == "phases" {
		return o.phasesPlan(slo)
	}
	if o.Workload == "trace" {
		return nil, errors.New("bench: --workload trace needs --trace FILE")
	}
	base := Config{Concurrency: o.Concurrency, Seed: o.Seed, Requests: o.Requests, Duration: o.Duration, Warmup: o.Warmup, SLO: slo}
	if base.Requests == 0 && base.Duration == 0 {
		base.Requests = 100
	}
	var rates []float64
	for r := range strings.SplitSeq(o.Rates, ",") {
		if r = strings.TrimSpace(r); r == "" {
			continue
		}
		x, err := strconv.ParseFloat(r, 64)
		if err != nil || !(x > 0) {
			return nil, fmt.Errorf("bench: --rate %q: each rate must be a positive number of requests/s", r)
		}
		rates = append(rates, x)
	}
	if len(rates) > 0 && concurrencyGiven && o.Concurrency <= 0 {
		return nil, errors.New("bench: --concurrency must be positive")
	}
	p := &Plan{}
	if len(rates) == 0 {
		if base.Concurrency == 0 {
			base.Concurrency = 4
		}
		p.Configs, p.Labels = []Config{base}, []string{fmt.Sprintf("concurrency=%d", base.Concurrency)}
	}
	for i, r := range rates {
		c := base
		c.Rate = r
		// Each rate draws prompts of its own: with one seed for all, a later rate
		// would resend the earlier one's prompts, which the server has cached, and
		// measure an easier load. The seed each run used is in its report.
		c.Seed = base.Seed + uint64(i)
		p.Configs, p.Labels = append(p.Configs, c), append(p.Labels, fmt.Sprintf("rate=%g", r))
	}
	for _, c := range p.Configs {
		if err := c.Validate(); err != nil {
			return nil, err
		}
	}
	prompts, err := CL100KPrompts()
	if err != nil {
		return nil, err
	}
	if p.Client, err = o.client(prompts); err != nil {
		return nil, err
	}
	p.base, p.prompts = prompts, prompts
	if p.NewLoad, err = o.workloadFactory(p); err != nil {
		return nil, err
	}
	_, err = p.NewLoad() // reject a bad workload before any request is sent
	return p, err
}

// client makes the plan's client.
func (o *Options) client(prompts *Prompts) (*Client, error) {
	c := &Client{
		URL: o.URL, Endpoint: o.Endpoint, Model: o.Model, APIKey: o.APIKey, Timeout: o.Timeout,
		Tokenizer: prompts.Tokenizer(), HTTP: NewHTTPClient(max(o.Concurrency, 64)),
	}
	if o.Temperature >= 0 {
		t := o.Temperature
		c.Temperature = &t
	}
	return c, c.Validate()
}

// tracePlan is the plan of a trace replay: one run, arrivals at the trace's
// timestamps, every request of the window.
func (o *Options) tracePlan(slo SLO) (*Plan, error) {
	switch {
	case o.Workload != "fixed" && o.Workload != "trace" && o.Workload != "mixed":
		// fixed and mixed are the commands' defaults, so only another choice is a conflict.
		return nil, fmt.Errorf("bench: --trace replays a trace; it cannot be combined with --workload %s", o.Workload)
	case strings.TrimSpace(o.Rates) != "":
		return nil, errors.New("bench: --trace sends each request at its timestamp; use --trace-speedup instead of --rate")
	case o.Endpoint != EndpointCompletions:
		return nil, errors.New("bench: --trace sends prompts as token ids, which only --endpoint completions takes")
	case o.Concurrency < 0:
		return nil, errors.New("bench: --concurrency must not be negative")
	}
	speedups, err := ParseSpeedups(o.TraceSpeedups)
	if err != nil {
		return nil, err
	}
	w := o.TraceWindow
	for _, x := range speedups {
		wx := w
		wx.Speedup = x
		if err := wx.Validate(); err != nil {
			return nil, err
		}
	}
	sources, err := ParseTraceSources(o.Trace)
	if err != nil {
		return nil, err
	}
	recsOf := make([][]TraceRecord, len(sources))
	for i, src := range sources {
		if recsOf[i], err = readTrace(src.File, w.BlockSize); err != nil {
			return nil, err
		}
	}
	if o.Requests > 0 && (w.Limit == 0 || o.Requests < w.Limit) {
		w.Limit = o.Requests
	}
	cfg := Config{Concurrency: o.Concurrency, Scheduled: true, Seed: o.Seed, Duration: o.Duration, Warmup: o.Warmup, SLO: slo}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	prompts, err := CL100KPrompts()
	if err != nil {
		return nil, err
	}
	p := &Plan{}
	if p.Client, err = o.client(prompts); err != nil {
		return nil, err
	}
	var warnings []string
	if msg := w.BlockWarning(); msg != "" {
		warnings = append(warnings, msg)
	}
	p.Warnings = warnings
	// One load per speedup, each the same window's requests, only closer
	// together; the seed stays, so every load sends the same prompts (each on a
	// fresh deployment in compare, so none finds them cached).
	loads := make([]func() (Workload, error), len(speedups))
	for i, x := range speedups {
		wx := w
		wx.Speedup = x
		reqs, name, err := applySources(sources, recsOf, wx, o.Requests)
		if err != nil {
			return nil, err
		}
		loads[i] = func() (Workload, error) {
			t, err := NewTraceReplay(name, reqs, wx.ScaledBlockSize(), o.Seed)
			if t != nil {
				t.IgnoreEOS, t.Warnings = o.TraceIgnoreEOS, warnings
			}
			return t, err
		}
		c := cfg
		label := "trace"
		if len(speedups) > 1 {
			c.TraceSpeedup, label = x, fmt.Sprintf("speedup=%g", x)
		}
		p.Configs, p.Labels = append(p.Configs, c), append(p.Labels, label)
	}
	p.NewLoad, p.loadAt = loads[0], func(i int) (Workload, error) { return loads[i]() }
	return p, nil
}

// ParseSpeedups reads --trace-speedup's comma-separated list. Each value is
// checked by TraceWindow.Validate; here only that it is a number, and that no
// value is given twice (two runs of one load add nothing to a capacity curve).
func ParseSpeedups(list string) ([]float64, error) {
	var out []float64
	for v := range strings.SplitSeq(list, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("bench: --trace-speedup %q: want a number, or a comma-separated list of them", v)
		}
		if slices.Contains(out, x) {
			return nil, fmt.Errorf("bench: --trace-speedup %g is given twice", x)
		}
		out = append(out, x)
	}
	if len(out) == 0 {
		return nil, errors.New("bench: --trace-speedup is empty; give a number, or a list (1,1.5,2)")
	}
	return out, nil
}

// eos sets --ignore-eos on a fixed or mixed workload.
func (o *Options) eos(m *Mixed, err error) (Workload, error) {
	if err != nil {
		return nil, err
	}
	m.IgnoreEOS = o.IgnoreEOS
	return m, nil
}

// workloadFactory returns a function that makes a fresh workload, with its
// prompts from pl (the served model's once Run has sized them).
func (o *Options) workloadFactory(pl *Plan) (func() (Workload, error), error) {
	switch o.Workload {
	case "fixed":
		return func() (Workload, error) { return o.eos(NewFixed(pl.prompts, o.ISL, o.OSL)) }, nil
	case "mixed":
		classes, err := ParseMix(o.Mix)
		if err != nil {
			return nil, err
		}
		return func() (Workload, error) { return o.eos(NewMixed(pl.prompts, classes)) }, nil
	case "shared-prefix":
		cfg := SharedPrefixConfig{PrefixTokens: o.PrefixLen, TurnTokens: o.ISL, OutputTokens: o.OSL, Turns: o.Turns, Conversations: o.Convs}
		return func() (Workload, error) { return NewSharedPrefix(pl.prompts, cfg) }, nil
	case "jsonl":
		if o.File == "" {
			return nil, errors.New("bench: --workload jsonl needs --file")
		}
		// The file's prompts are what they are; only their counting uses prompts.
		pl.base = nil
		return func() (Workload, error) {
			f, err := os.Open(o.File)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			return ReadJSONL(f, pl.prompts)
		}, nil
	}
	return nil, fmt.Errorf("bench: unknown --workload %q (fixed, mixed, shared-prefix or jsonl)", o.Workload)
}

// phasesPlan is the plan of a shifting workload: arrivals at the phases' own
// times, one run per --phases-scale.
func (o *Options) phasesPlan(slo SLO) (*Plan, error) {
	switch {
	case o.Phases == "":
		return nil, errors.New("bench: --workload phases needs --phases SPEC")
	case o.Workload != "fixed" && o.Workload != "mixed" && o.Workload != "phases":
		return nil, fmt.Errorf("bench: --phases is a workload of its own; it cannot be combined with --workload %s", o.Workload)
	case strings.TrimSpace(o.Rates) != "":
		return nil, errors.New("bench: --phases gives each phase its rate; use --phases-scale instead of --rate")
	case o.Concurrency < 0:
		return nil, errors.New("bench: --concurrency must not be negative")
	}
	phases, err := ParsePhases(o.Phases)
	if err != nil {
		return nil, err
	}
	scales, err := ParseSpeedups(o.PhasesScales)
	if err != nil {
		return nil, fmt.Errorf("%w (--phases-scale)", err)
	}
	cfg := Config{Concurrency: o.Concurrency, Scheduled: true, Seed: o.Seed, Requests: o.Requests, Duration: o.Duration, Warmup: o.Warmup, SLO: slo}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	prompts, err := CL100KPrompts()
	if err != nil {
		return nil, err
	}
	p := &Plan{base: prompts, prompts: prompts}
	if p.Client, err = o.client(prompts); err != nil {
		return nil, err
	}
	loads := make([]func() (Workload, error), len(scales))
	for i, x := range scales {
		if !(x > 0) {
			return nil, fmt.Errorf("bench: --phases-scale %g must be positive", x)
		}
		loads[i] = func() (Workload, error) {
			w, err := NewPhases(p.prompts, phases, x)
			if w != nil {
				w.IgnoreEOS = o.IgnoreEOS
			}
			return w, err
		}
		c, label := cfg, "phases"
		if len(scales) > 1 {
			// The scale is the load axis capacity is read on, as a trace's speedup.
			c.TraceSpeedup, label = x, fmt.Sprintf("scale=%g", x)
		}
		p.Configs, p.Labels = append(p.Configs, c), append(p.Labels, label)
	}
	p.NewLoad, p.loadAt = loads[0], func(i int) (Workload, error) { return loads[i]() }
	_, err = p.NewLoad()
	return p, err
}

// readTrace reads one trace file.
func readTrace(file string, blockSize int) ([]TraceRecord, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("bench: --trace: %w", err)
	}
	defer f.Close()
	recs, err := ParseTrace(f, blockSize)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, file)
	}
	return recs, nil
}

// applySources cuts each source's window (its own, or w's) and replays them
// one after the other, at most requests of them in all (0: every one); it
// returns them and the replay's name.
func applySources(sources []TraceSource, recsOf [][]TraceRecord, w TraceWindow, requests int) ([]TraceRequest, string, error) {
	if len(sources) == 1 && sources[0].Start < 0 {
		reqs, err := w.Apply(recsOf[0])
		return reqs, traceName(filepath.Base(sources[0].File), w, len(reqs)), err
	}
	windows := make([][]TraceRequest, len(sources))
	names := make([]string, len(sources))
	for i, src := range sources {
		ws := w
		if src.Start >= 0 {
			ws.Start, ws.Limit = src.Start, src.Limit
		}
		var err error
		if windows[i], err = ws.Apply(recsOf[i]); err != nil {
			return nil, "", fmt.Errorf("%w (in %s)", err, src.File)
		}
		names[i] = traceName(filepath.Base(src.File), ws, len(windows[i]))
	}
	reqs := ConcatWindows(windows)
	if requests > 0 && len(reqs) > requests {
		reqs = reqs[:requests]
	}
	return reqs, strings.Join(names, " then "), nil
}
