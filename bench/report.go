package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
)

// Report is one run's results: the whole run and each request class.
type Report struct {
	// Label names the run in a sweep or a comparison ("rate=2", "threshold").
	Label string `json:"label,omitempty"`
	// Group gathers the runs of one deployment in a comparison.
	Group       string  `json:"group,omitempty"`
	Workload    string  `json:"workload"`
	Concurrency int     `json:"concurrency,omitempty"`
	Rate        float64 `json:"rate,omitempty"`
	// Scheduled says the arrivals were the workload's own (a trace's timestamps).
	Scheduled bool `json:"scheduled,omitempty"`
	// TraceSpeedup is the run's --trace-speedup in a sweep of several; outside
	// one it is 0 and the speedup, when not 1, is in Workload's name.
	TraceSpeedup float64 `json:"trace_speedup,omitempty"`
	// TraceReuse is a trace's own prefix reuse, the hit rate an unbounded cache
	// shared by every server would have had; TraceCut counts its requests cut to
	// fit the model's context.
	TraceReuse *float64 `json:"trace_prefix_reuse,omitempty"`
	TraceCut   int      `json:"trace_cut,omitempty"`
	// Warnings are what the run's set-up made doubtful in its figures.
	Warnings    []string  `json:"warnings,omitempty"`
	Seed        uint64    `json:"seed"`
	WarmupS     float64   `json:"warmup_s"`
	SLO         string    `json:"slo,omitempty"`
	Interrupted bool      `json:"interrupted,omitempty"`
	StartedAt   time.Time `json:"started_at"`
	Overall     Summary   `json:"overall"`
	Classes     []Summary `json:"classes"`
	// Gating is the router's gating through the deployment's runs (compare only).
	Gating *Gating `json:"router_gating,omitempty"`
	// Requests holds every request, warm-up ones included (marked).
	Requests []Record `json:"requests,omitempty"`
	// Results are the raw measurements Requests is made from.
	Results []Result `json:"-"`
}

// Record is one request in the JSON output, in milliseconds.
type Record struct {
	Class        string    `json:"class"`
	StartS       float64   `json:"start_s"`
	TTFTMS       float64   `json:"ttft_ms"`
	TPOTMS       *float64  `json:"tpot_ms,omitempty"`
	E2EMS        float64   `json:"e2e_ms"`
	ITLMS        []float64 `json:"itl_ms,omitempty"`
	PromptTokens int       `json:"prompt_tokens"`
	CachedTokens int       `json:"cached_tokens,omitempty"`
	// CacheUnreported: the usage had no prompt_tokens_details.
	CacheUnreported bool   `json:"cache_unreported,omitempty"`
	OutputTokens    int    `json:"output_tokens"`
	PrefillPath     string `json:"prefill_path,omitempty"`
	Error           string `json:"error,omitempty"`
	Aborted         bool   `json:"aborted,omitempty"`
	Warmup          bool   `json:"warmup,omitempty"`
}

// summarize fills Overall, Classes and Requests from Results. order lists the
// classes in the workload's own order; others follow in natural order.
func (r *Report) summarize(slo SLO, window time.Duration, order []string) {
	r.Overall = Summarize("all", r.Results, window, slo)
	byClass := map[string][]Result{}
	for _, res := range r.Results {
		byClass[res.Class] = append(byClass[res.Class], res)
	}
	names := slices.SortedFunc(maps.Keys(byClass), func(a, b string) int {
		ia, ib := slices.Index(order, a), slices.Index(order, b)
		switch {
		case ia >= 0 && ib >= 0:
			return ia - ib
		case ia >= 0:
			return -1
		case ib >= 0:
			return 1
		}
		return naturalCompare(a, b)
	})
	r.Classes = nil
	for _, n := range names {
		r.Classes = append(r.Classes, Summarize(n, byClass[n], window, slo))
	}
	r.Requests = make([]Record, len(r.Results))
	for i, res := range r.Results {
		rec := Record{
			Class: res.Class, StartS: res.Start.Seconds(), TTFTMS: ms(res.TTFT), E2EMS: ms(res.E2E),
			PromptTokens: res.PromptTokens, CachedTokens: res.CachedTokens, CacheUnreported: !res.CachedReported,
			OutputTokens: res.OutputTokens, PrefillPath: res.PrefillPath,
			Error: res.Err, Aborted: res.Aborted, Warmup: res.Warmup,
		}
		if t, ok := res.TPOT(); ok && res.OK() {
			v := ms(t)
			rec.TPOTMS = &v
		}
		for _, g := range res.ITL {
			rec.ITLMS = append(rec.ITLMS, ms(g))
		}
		r.Requests[i] = rec
	}
}

// naturalCompare orders strings with their digit runs compared as numbers, so
// turn-2 comes before turn-10.
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := unicode.IsDigit(rune(a[0])), unicode.IsDigit(rune(b[0]))
		if da && db {
			na, ra := leadingNumber(a)
			nb, rb := leadingNumber(b)
			if na != nb {
				if na < nb {
					return -1
				}
				return 1
			}
			a, b = ra, rb
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func leadingNumber(s string) (uint64, string) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n, _ := strconv.ParseUint(s[:i], 10, 64)
	return n, s[i:]
}

// WriteTable writes the report as two tables a human reads: outcomes and
// throughput per class, then latency percentiles per class.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := r.Workload
	if r.Label != "" {
		head = r.Label + ": " + head
	}
	arrival := fmt.Sprintf("concurrency %d", r.Concurrency)
	switch {
	case r.Scheduled:
		arrival = "arrivals at the trace's timestamps"
		if r.Concurrency > 0 {
			arrival += fmt.Sprintf(", at most %d in flight", r.Concurrency)
		}
	case r.Rate > 0:
		arrival = fmt.Sprintf("Poisson rate %g/s", r.Rate)
		if r.Concurrency > 0 {
			arrival += fmt.Sprintf(", at most %d in flight", r.Concurrency)
		}
	}
	fmt.Fprintf(w, "== %s\n%s, seed %d, warm-up %gs, measured %.1fs", head, arrival, r.Seed, r.WarmupS, r.Overall.DurationS)
	if r.Interrupted {
		fmt.Fprint(w, " (interrupted)")
	}
	fmt.Fprintln(w)
	good := ""
	if r.SLO != "" {
		good = "good/s (" + r.SLO + ")\t"
	}
	fmt.Fprintf(tw, "class\tsent\tok\tfailed\taborted\tin tok\tcached\thit\tout tok\treq/s\tout tok/s\t%sprefill paths\t\n", good)
	for _, s := range append([]Summary{r.Overall}, r.Classes...) {
		g := ""
		if s.Goodput != nil {
			g = fmt.Sprintf("%.3f (%d)\t", *s.Goodput, *s.GoodRequests)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f%%\t%d\t%.3f\t%.1f\t%s%s\t\n", s.Class, s.Requests, s.Completed, s.Failed, s.Aborted,
			s.InputTokens, s.CachedTokens, 100*s.CacheHitRate, s.OutputTokens, s.RequestThroughput, s.OutputThroughput, g, paths(s.PrefillPaths))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	fmt.Fprintf(tw, "class\tms\tmean\tp50\tp90\tp99\tn\t\n")
	for _, s := range append([]Summary{r.Overall}, r.Classes...) {
		for i, m := range []struct {
			name string
			d    Dist
		}{{"TTFT", s.TTFT}, {"TPOT", s.TPOT}, {"TBT", s.TBT}, {"ITL", s.ITL}, {"E2E", s.E2E}} {
			c := ""
			if i == 0 {
				c = s.Class
			}
			fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t\n", c, m.name, m.d.Mean, m.d.P50, m.d.P90, m.d.P99, m.d.N)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	r.writeNotes(w)
	if len(r.Overall.Errors) > 0 {
		fmt.Fprintln(w, "errors:")
		for _, e := range slices.Sorted(maps.Keys(r.Overall.Errors)) {
			fmt.Fprintf(w, "  %d x %s\n", r.Overall.Errors[e], e)
		}
	}
	_, err := fmt.Fprintln(w)
	return err
}

// writeNotes writes what the tables do not show: SLO attainment, the cache hit
// rate against what a trace offered, and output lengths not met.
func (r *Report) writeNotes(w io.Writer) {
	o := r.Overall
	if len(o.Attainment) > 0 {
		var parts []string
		for _, k := range []string{"ttft", "tpot", "tbt", "e2e", "all"} {
			if v, ok := o.Attainment[k]; ok {
				parts = append(parts, fmt.Sprintf("%s %.1f%%", k, 100*v))
			}
		}
		fmt.Fprintf(w, "SLO attainment (%s; share of requests sent): %s\n", r.SLO, strings.Join(parts, ", "))
	}
	hit := fmt.Sprintf("prefix cache hit rate seen by the servers: %.1f%% of prompt tokens (usage.prompt_tokens_details.cached_tokens)",
		100*o.CacheHitRate)
	if o.CacheUnreported > 0 {
		hit += fmt.Sprintf(", but %d of %d answers had no prompt_tokens_details, so it is a lower bound", o.CacheUnreported, o.Completed)
	}
	if r.TraceReuse != nil {
		hit += fmt.Sprintf("; the trace's own reuse (unbounded shared cache): %.1f%%", 100**r.TraceReuse)
	}
	fmt.Fprintln(w, hit)
	for _, m := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", m)
	}
	if r.TraceCut > 0 {
		fmt.Fprintf(w, "%d requests of the trace were cut to fit the model's context (prompt tail first)\n", r.TraceCut)
	}
	if o.ShortOutputs > 0 {
		fmt.Fprintf(w, "output length not met: %d requests ended early, %d tokens short in all (sent without ignore_eos, or the server ignored it)\n",
			o.ShortOutputs, o.ShortTokens)
	}
}

func paths(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// WriteComparison writes one row per run and class, so that runs of a sweep or a
// comparison can be read side by side. Latencies are in milliseconds.
func WriteComparison(w io.Writer, runs []*Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "run\tclass\tok\tfailed\treq/s\tout tok/s\tgood/s\tSLO met\thit\t"+
		"TTFT mean\tTTFT p50\tTTFT p99\tTPOT mean\tTPOT p50\tTPOT p99\tITL p50\tITL p99\tE2E p50\tE2E p99\tprefill paths\t\n")
	for _, r := range runs {
		for i, s := range append([]Summary{r.Overall}, r.Classes...) {
			label := ""
			if i == 0 {
				label = r.Label
			}
			g := "-"
			if s.Goodput != nil {
				g = fmt.Sprintf("%.3f", *s.Goodput)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.3f\t%.1f\t%s\t%s\t%.1f%%\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t\n",
				label, s.Class, s.Completed, s.Failed, s.RequestThroughput, s.OutputThroughput, g, attained(s), 100*s.CacheHitRate,
				s.TTFT.Mean, s.TTFT.P50, s.TTFT.P99, s.TPOT.Mean, s.TPOT.P50, s.TPOT.P99,
				s.ITL.P50, s.ITL.P99, s.E2E.P50, s.E2E.P99, paths(s.PrefillPaths))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeGating(w, runs, "")
}

// writeGating writes, once per deployment whose router gated, the adaptive
// threshold's path and the requests sent to each class. prefix starts each line.
func writeGating(w io.Writer, runs []*Report, prefix string) error {
	seen := map[*Gating]bool{}
	// A deployment started afresh for each load of a sweep gated each load
	// on its own: those lines are named by run, not by deployment.
	gatings := map[string]map[*Gating]bool{}
	for _, r := range runs {
		if gatings[r.Group] == nil {
			gatings[r.Group] = map[*Gating]bool{}
		}
		gatings[r.Group][r.Gating] = true
	}
	for _, r := range runs {
		g := r.Gating
		if g == nil || seen[g] {
			continue
		}
		seen[g] = true
		gated := g.MovesUp+g.MovesDown > 0
		for c := range g.Routed {
			gated = gated || c != "all"
		}
		if !gated {
			continue
		}
		name := r.Group
		if name == "" || len(gatings[r.Group]) > 1 {
			name = r.Label
		}
		if _, err := fmt.Fprintf(w, "%s%s router: %s\n", prefix, name, g); err != nil {
			return err
		}
	}
	return nil
}

// attained is the share of requests that met every objective, or "-".
func attained(s Summary) string {
	if v, ok := s.Attainment["all"]; ok {
		return fmt.Sprintf("%.1f%%", 100*v)
	}
	return "-"
}

// attainedEach is the share of requests that met each objective, or "-".
func attainedEach(s Summary) string {
	var parts []string
	for _, k := range []string{"ttft", "tpot", "tbt", "e2e"} {
		if v, ok := s.Attainment[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f%%", k, 100*v))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// WriteMarkdown writes the same rows as WriteComparison as a Markdown table, for
// a results file under docs/results/.
func WriteMarkdown(w io.Writer, runs []*Report) error {
	fmt.Fprintln(w, "| run | class | ok | failed | req/s | out tok/s | good/s | SLO met | met, each | cache hit | TTFT mean | TTFT p50 | TTFT p99 | "+
		"TPOT mean | TPOT p50 | TPOT p99 | TBT p50 | TBT p99 | ITL p50 | ITL p99 | E2E p50 | E2E p99 | prefill paths |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	for _, r := range runs {
		for _, s := range append([]Summary{r.Overall}, r.Classes...) {
			g := "-"
			if s.Goodput != nil {
				g = fmt.Sprintf("%.3f", *s.Goodput)
			}
			_, err := fmt.Fprintf(w, "| %s | %s | %d | %d | %.3f | %.1f | %s | %s | %s | %.1f%% | %.0f | %.0f | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f | %.0f | %s |\n",
				r.Label, s.Class, s.Completed, s.Failed, s.RequestThroughput, s.OutputThroughput, g, attained(s), attainedEach(s), 100*s.CacheHitRate,
				s.TTFT.Mean, s.TTFT.P50, s.TTFT.P99, s.TPOT.Mean, s.TPOT.P50, s.TPOT.P99, s.TBT.P50, s.TBT.P99,
				s.ITL.P50, s.ITL.P99, s.E2E.P50, s.E2E.P99, paths(s.PrefillPaths))
			if err != nil {
				return err
			}
		}
	}
	fmt.Fprintln(w)
	return writeGating(w, runs, "- ")
}

// RestoreResults rebuilds Results from Requests, for a report read back from JSON
// (charts drawn again without running again).
func (r *Report) RestoreResults() {
	msd := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	r.Results = make([]Result, len(r.Requests))
	for i, q := range r.Requests {
		res := Result{
			Class: q.Class, Start: time.Duration(q.StartS * float64(time.Second)), TTFT: msd(q.TTFTMS), E2E: msd(q.E2EMS),
			PromptTokens: q.PromptTokens, CachedTokens: q.CachedTokens, CachedReported: !q.CacheUnreported, OutputTokens: q.OutputTokens,
			PrefillPath: q.PrefillPath, Err: q.Error, Aborted: q.Aborted, Warmup: q.Warmup, Chunks: len(q.ITLMS) + 1,
		}
		for _, g := range q.ITLMS {
			res.ITL = append(res.ITL, msd(g))
		}
		r.Results[i] = res
	}
}
