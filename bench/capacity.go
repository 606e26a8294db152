package bench

import (
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// DefaultCapacityAttainment is the SLO attainment a deployment must keep for a
// load to be within its capacity: DistServe's 90 %.
const DefaultCapacityAttainment = 0.9

// Capacity units: what a sweep's load is counted in.
const (
	UnitRate    = "req/s"
	UnitSpeedup = "trace speedup"
)

// CapacityPoint is one probed load of a deployment and the share of its
// requests that met every objective there.
type CapacityPoint struct {
	Load       float64 `json:"load"`
	Attainment float64 `json:"slo_attainment"`
	Run        string  `json:"run"`
}

// Capacity is one deployment's capacity in DistServe's sense: the highest load
// at which its SLO attainment stays at or above the target.
type Capacity struct {
	Deployment string `json:"deployment"`
	// Points are the probed loads, lowest first.
	Points []CapacityPoint `json:"points"`
	// Value is the capacity, interpolated linearly between the last load that
	// met the target and the first that did not. With Bound ">" every load met
	// it and Value is the highest probed; with "<" none did and Value is the
	// lowest probed.
	Value float64 `json:"capacity"`
	Bound string  `json:"bound,omitempty"`
	// Note says what a reader of Value must know (a curve that meets the
	// target again above its first crossing).
	Note string `json:"note,omitempty"`
	// Ratio is Value over the best baseline's, as text ("1.32x", ">= 1.10x"
	// when a bound leaves only a bound, "?" when it leaves nothing); RatioValue
	// is set when it is exact.
	Ratio      string   `json:"ratio_to_best_baseline,omitempty"`
	RatioValue *float64 `json:"ratio_value,omitempty"`
}

// CapacityTable is the capacity of every deployment of a sweep.
type CapacityTable struct {
	Target float64 `json:"target_attainment"`
	SLO    string  `json:"slo"`
	Unit   string  `json:"unit"`
	// LoadScale multiplied every load (rescore's time scale: loads in modelled
	// time); 1 when they are as sent.
	LoadScale float64 `json:"load_scale"`
	// Baseline is the best of the baseline deployments (aggregated...,
	// always-remote...), the one the ratios are to; "" when none ran.
	Baseline string     `json:"best_baseline,omitempty"`
	Rows     []Capacity `json:"deployments"`
}

// IsBaseline says whether a deployment is one the goal is measured against:
// every worker aggregated, or every prefill remote.
func IsBaseline(deployment string) bool {
	return strings.HasPrefix(deployment, "aggregated") || strings.HasPrefix(deployment, "always-remote")
}

// speedupInName finds the speedup a trace replay's name gives (traceName's
// "speedup X", absent at 1), for runs saved before reports carried it.
var speedupInName = regexp.MustCompile(`, speedup ([0-9.eE+-]+)`)

// loadOf is the load a run was sent at and its unit; ok is false for a closed
// loop, which has no load in this sense.
func loadOf(r *Report) (load float64, unit string, ok bool) {
	switch {
	case r.Scheduled:
		if r.TraceSpeedup > 0 {
			return r.TraceSpeedup, UnitSpeedup, true
		}
		if m := speedupInName.FindStringSubmatch(r.Workload); m != nil {
			x, err := strconv.ParseFloat(m[1], 64)
			return x, UnitSpeedup, err == nil && x > 0
		}
		return 1, UnitSpeedup, true
	case r.Rate > 0:
		return r.Rate, UnitRate, true
	}
	return 0, "", false
}

// Capacities reads each deployment's capacity off runs (grouped by
// Report.Group; runs of one deployment from several files join one curve),
// with every load multiplied by loadScale. It returns nil when there is no
// capacity to read: target 0, runs judged under no SLO, or no deployment with
// two loads or more. Runs judged under different SLOs, or whose loads are in
// different units, are an error.
func Capacities(runs []*Report, target, loadScale float64) (*CapacityTable, error) {
	if target == 0 {
		return nil, nil
	}
	if !(target > 0 && target <= 1) {
		return nil, fmt.Errorf("bench: capacity attainment %g: want a share in (0, 1]", target)
	}
	t := &CapacityTable{Target: target, LoadScale: loadScale}
	index := map[string]int{}
	sweep := false
	for _, r := range runs {
		load, unit, ok := loadOf(r)
		att, judged := r.Overall.Attainment["all"]
		if !ok || !judged {
			continue
		}
		switch {
		case t.Unit == "":
			t.Unit, t.SLO = unit, r.SLO
		case t.Unit != unit:
			return nil, fmt.Errorf("bench: capacity: the runs mix loads in %s and in %s", t.Unit, unit)
		case t.SLO != r.SLO:
			return nil, fmt.Errorf("bench: capacity: the runs were judged under different SLOs (%s, %s)", t.SLO, r.SLO)
		}
		i, seen := index[r.Group]
		if !seen {
			i = len(t.Rows)
			index[r.Group] = i
			t.Rows = append(t.Rows, Capacity{Deployment: r.Group})
		}
		t.Rows[i].Points = append(t.Rows[i].Points, CapacityPoint{Load: load * loadScale, Attainment: att, Run: r.Label})
		sweep = sweep || len(t.Rows[i].Points) > 1
	}
	if !sweep {
		return nil, nil
	}
	for i := range t.Rows {
		t.Rows[i].read(target)
	}
	t.rate()
	return t, nil
}

// read sorts the points and reads the capacity off them. A curve that falls
// below the target and meets it again higher up is not monotone (noise, or a
// load too short to queue): the capacity is the first crossing, reading from
// the lowest load up, and Note says where it met the target again.
func (c *Capacity) read(target float64) {
	p := c.Points
	slices.SortStableFunc(p, func(a, b CapacityPoint) int {
		switch {
		case a.Load < b.Load:
			return -1
		case a.Load > b.Load:
			return 1
		}
		return 0
	})
	first := slices.IndexFunc(p, func(x CapacityPoint) bool { return x.Attainment < target })
	switch first {
	case -1:
		c.Value, c.Bound = p[len(p)-1].Load, ">"
		return
	case 0:
		c.Value, c.Bound = p[0].Load, "<"
	default:
		a, b := p[first-1], p[first]
		c.Value = a.Load + (a.Attainment-target)/(a.Attainment-b.Attainment)*(b.Load-a.Load)
	}
	var again []string
	for _, x := range p[first+1:] {
		if x.Attainment >= target {
			again = append(again, fmt.Sprintf("%g", x.Load))
		}
	}
	if len(again) > 0 {
		c.Note = fmt.Sprintf("not monotone: below the target at %g, meets it again at %s; the capacity is the first crossing",
			p[first].Load, strings.Join(again, ", "))
	}
}

// interval is the range the capacity lies in: [Value, Value] when read
// between two loads, above the highest load probed, or below the lowest.
func (c *Capacity) interval() (lo, hi float64) {
	switch c.Bound {
	case ">":
		return c.Value, math.Inf(1)
	case "<":
		return 0, c.Value
	}
	return c.Value, c.Value
}

// rate finds the best baseline and each deployment's ratio to it.
func (t *CapacityTable) rate() {
	best := -1
	for i := range t.Rows {
		if !IsBaseline(t.Rows[i].Deployment) {
			continue
		}
		lo, hi := t.Rows[i].interval()
		if best < 0 {
			best = i
			continue
		}
		blo, bhi := t.Rows[best].interval()
		if lo > blo || lo == blo && hi > bhi {
			best = i
		}
	}
	if best < 0 {
		return
	}
	t.Baseline = t.Rows[best].Deployment
	blo, bhi := t.Rows[best].interval()
	for i := range t.Rows {
		r := &t.Rows[i]
		if i == best {
			one := 1.0
			r.Ratio, r.RatioValue = "1 (best baseline)", &one
			continue
		}
		lo, hi := r.interval()
		rlo, rhi := lo/bhi, hi/blo
		switch {
		case rlo == rhi:
			r.Ratio, r.RatioValue = fmt.Sprintf("%.2fx", rlo), &rlo
		case rlo > 0 && math.IsInf(rhi, 1):
			r.Ratio = fmt.Sprintf(">= %.2fx", rlo)
		case rlo == 0 && !math.IsInf(rhi, 1):
			r.Ratio = fmt.Sprintf("<= %.2fx", rhi)
		default:
			r.Ratio = "?"
		}
	}
}

// loads is every load any deployment was probed at, lowest first.
func (t *CapacityTable) loads() []float64 {
	var out []float64
	for _, r := range t.Rows {
		for _, p := range r.Points {
			if !slices.Contains(out, p.Load) {
				out = append(out, p.Load)
			}
		}
	}
	slices.Sort(out)
	return out
}

// cells are a row's texts: deployment, capacity, ratio, then the attainment at
// each of loads ("-" where not probed; several runs at one load joined by /).
func (t *CapacityTable) cells(r Capacity, loads []float64) []string {
	capacity := fmt.Sprintf("%.3g", r.Value)
	if r.Value >= 1000 { // %g would turn to 1.23e+03
		capacity = fmt.Sprintf("%.0f", r.Value)
	}
	switch r.Bound {
	case ">":
		capacity = fmt.Sprintf("> %g (max probed)", r.Value)
	case "<":
		capacity = fmt.Sprintf("< %g (min probed)", r.Value)
	}
	ratio := r.Ratio
	if ratio == "" {
		ratio = "-"
	}
	name := r.Deployment
	if name == "" {
		name = "(no deployment name)"
	}
	out := []string{name, capacity, ratio}
	for _, l := range loads {
		var at []string
		for _, p := range r.Points {
			if p.Load == l {
				at = append(at, fmt.Sprintf("%.1f%%", 100*p.Attainment))
			}
		}
		if len(at) == 0 {
			at = []string{"-"}
		}
		out = append(out, strings.Join(at, " / "))
	}
	return out
}

// title says what the table measures.
func (t *CapacityTable) title() string {
	s := fmt.Sprintf("capacity: the highest load (%s) with SLO attainment >= %g%% (%s), interpolated between probed loads",
		t.Unit, 100*t.Target, t.SLO)
	if t.LoadScale != 1 {
		s += fmt.Sprintf("; loads multiplied by the time scale %g (modelled time)", t.LoadScale)
	}
	return s
}

// footer is what follows the table: the baseline the ratios are to, and notes.
func (t *CapacityTable) footer() []string {
	var out []string
	if t.Baseline != "" {
		out = append(out, fmt.Sprintf("best baseline (aggregated..., always-remote...): %s; ratios are to its capacity", t.Baseline))
	} else {
		out = append(out, "no baseline deployment (aggregated..., always-remote...) ran: no ratios")
	}
	for _, r := range t.Rows {
		if r.Note != "" {
			out = append(out, fmt.Sprintf("%s: %s", r.Deployment, r.Note))
		}
	}
	return out
}

// WriteCapacity writes the table as text, after a comparison's.
func WriteCapacity(w io.Writer, t *CapacityTable) error {
	loads := t.loads()
	fmt.Fprintln(w, t.title())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"deployment", "capacity", "vs best baseline"}
	for _, l := range loads {
		head = append(head, fmt.Sprintf("met @%g", l))
	}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, r := range t.Rows {
		fmt.Fprintln(tw, strings.Join(t.cells(r, loads), "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range t.footer() {
		fmt.Fprintln(w, s)
	}
	_, err := fmt.Fprintln(w)
	return err
}

// WriteCapacityMarkdown writes the table as Markdown, for compare.md.
func WriteCapacityMarkdown(w io.Writer, t *CapacityTable) error {
	loads := t.loads()
	fmt.Fprintf(w, "%s.\n\n", strings.ToUpper(t.title()[:1])+t.title()[1:])
	head, rule := []string{"deployment", "capacity", "vs best baseline"}, []string{"---", "---:", "---:"}
	for _, l := range loads {
		head, rule = append(head, fmt.Sprintf("met @%g", l)), append(rule, "---:")
	}
	fmt.Fprintf(w, "| %s |\n| %s |\n", strings.Join(head, " | "), strings.Join(rule, " | "))
	for _, r := range t.Rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(t.cells(r, loads), " | "))
	}
	fmt.Fprintln(w)
	for _, s := range t.footer() {
		fmt.Fprintf(w, "- %s\n", s)
	}
	_, err := fmt.Fprintln(w)
	return err
}
