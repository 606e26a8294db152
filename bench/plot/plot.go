// Package plot draws tandem bench's charts as PNG files with gonum/plot: CDFs of
// TTFT and ITL, and throughput against the offered rate of a sweep.
package plot

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/tandem-serve/tandem/bench"
)

// Series is one line of a chart.
type Series struct {
	Name   string
	Values []float64
}

// maxPoints bounds the points of one CDF line; more are thinned to quantiles.
const maxPoints = 2000

// CDF draws the empirical CDF of each series on a logarithmic x axis (latencies
// span orders of magnitude) and saves it as a PNG.
func CDF(path, title, xlabel string, series []Series) error {
	p := gplot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = "fraction at or below"
	p.X.Scale = gplot.LogScale{}
	p.X.Tick.Marker = logTicks{}
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = false, false
	drawn := 0
	for i, s := range series {
		pts := cdfPoints(s.Values)
		if len(pts) == 0 {
			continue
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (n=%d)", s.Name, len(s.Values)), l)
		drawn++
	}
	if drawn == 0 {
		return fmt.Errorf("plot: %s: no values to draw", title)
	}
	// Start the axis at the lowest series' 1st percentile: a few near-zero gaps
	// (chunks read back to back) would otherwise stretch the log axis over decades
	// nobody looks at, and squeeze the body and the tail.
	lo := math.Inf(1)
	for _, s := range series {
		if len(s.Values) > 0 {
			v := slices.Clone(s.Values)
			slices.Sort(v)
			lo = math.Min(lo, bench.Percentile(v, 1))
		}
	}
	p.X.Min = math.Max(lo, 1e-3)
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}

// cdfPoints returns the points (v, fraction <= v), thinned to maxPoints, with
// values clamped above zero for the log axis.
func cdfPoints(values []float64) plotter.XYs {
	v := slices.Clone(values)
	slices.Sort(v)
	n := len(v)
	if n == 0 {
		return nil
	}
	step := max(1, n/maxPoints)
	var pts plotter.XYs
	for i := 0; i < n; i += step {
		pts = append(pts, plotter.XY{X: math.Max(v[i], 1e-3), Y: float64(i+1) / float64(n)})
	}
	if last := pts[len(pts)-1]; last.Y < 1 {
		pts = append(pts, plotter.XY{X: math.Max(v[n-1], 1e-3), Y: 1})
	}
	return pts
}

// Throughput draws, against the offered rate of each run, the request throughput
// achieved (or, with goodput, the rate of requests that met the SLO), a line per
// group of runs (per deployment in a comparison), with y = x for reference.
func Throughput(path, title string, runs []*bench.Report, goodput bool) error {
	var groups []string
	lines := map[string]plotter.XYs{}
	var rates []float64
	for _, r := range runs {
		if r.Rate <= 0 || (goodput && r.Overall.Goodput == nil) {
			continue
		}
		y := r.Overall.RequestThroughput
		if goodput {
			y = *r.Overall.Goodput
		}
		if _, ok := lines[r.Group]; !ok {
			groups = append(groups, r.Group)
		}
		lines[r.Group] = append(lines[r.Group], plotter.XY{X: r.Rate, Y: y})
		if !slices.Contains(rates, r.Rate) {
			rates = append(rates, r.Rate)
		}
	}
	if len(rates) < 2 {
		return errors.New("plot: throughput against rate needs a sweep of at least two rates")
	}
	slices.Sort(rates)
	var ideal plotter.XYs
	for _, x := range rates {
		ideal = append(ideal, plotter.XY{X: x, Y: x})
	}
	p := gplot.New()
	p.Title.Text = title
	p.X.Label.Text = "offered rate (requests/s, Poisson)"
	p.Y.Label.Text = "requests/s"
	if goodput {
		p.Y.Label.Text = "requests/s meeting the SLO (" + runs[0].SLO + ")"
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	args := []any{"offered", ideal}
	for _, g := range groups {
		name := g
		if name == "" {
			name = "achieved"
			if goodput {
				name = "goodput"
			}
		}
		args = append(args, name, lines[g])
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return err
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}

// logTicks labels 1, 2 and 5 times each power of ten, and marks the other
// integers times it, so a log axis that spans less than a decade still has labels.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []gplot.Tick {
	var ticks []gplot.Tick
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		p := math.Pow(10, e)
		for m := 1.0; m < 10; m++ {
			v := m * p
			if v < lo || v > hi {
				continue
			}
			t := gplot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func fileName(s string) string { return strings.Trim(unsafeName.ReplaceAllString(s, "_"), "_") }

// Reports writes the charts for runs into dir and returns the files written:
// ttft_cdf.png and itl_cdf.png (one line per run, or per class for a single run
// with several classes), TTFT and ITL CDFs per class when there are several runs,
// and throughput.png (and goodput.png with an SLO) for a rate sweep. A comparison
// swept over rates gets its CDFs per rate (ttft_cdf_rate4.png, ...), a line per
// deployment.
func Reports(dir string, runs []*bench.Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	var errs []error
	save := func(name string, err error) {
		if err != nil {
			errs = append(errs, err)
			return
		}
		files = append(files, name)
	}
	for _, panel := range panels(runs) {
		suffix, title := "", ""
		if panel.rate > 0 {
			suffix, title = fmt.Sprintf("_rate%g", panel.rate), fmt.Sprintf(" at %g requests/s", panel.rate)
		}
		rs := panel.runs
		var ttft, itl []Series
		if len(rs) == 1 && len(rs[0].Classes) > 1 {
			ttft, itl = classSeries(rs[0])
		} else {
			for _, r := range rs {
				t, i := bench.Latencies(r.Results)
				ttft, itl = append(ttft, Series{seriesName(r), t}), append(itl, Series{seriesName(r), i})
			}
		}
		name := filepath.Join(dir, "ttft_cdf"+suffix+".png")
		save(name, CDF(name, "TTFT: time to first token"+title, "TTFT (ms, log scale)", ttft))
		name = filepath.Join(dir, "itl_cdf"+suffix+".png")
		save(name, CDF(name, "ITL: gaps between streamed chunks, pooled"+title, "ITL (ms, log scale)", itl))
		if len(rs) < 2 {
			continue
		}
		for _, class := range classNames(rs) {
			var ts, is []Series
			for _, r := range rs {
				t, i := bench.Latencies(onlyClass(r.Results, class))
				ts, is = append(ts, Series{seriesName(r), t}), append(is, Series{seriesName(r), i})
			}
			name = filepath.Join(dir, "ttft_cdf_"+fileName(class)+suffix+".png")
			save(name, CDF(name, "TTFT, class "+class+title, "TTFT (ms, log scale)", ts))
			name = filepath.Join(dir, "itl_cdf_"+fileName(class)+suffix+".png")
			save(name, CDF(name, "ITL, class "+class+title, "ITL (ms, log scale)", is))
		}
	}
	rated := 0
	for _, r := range runs {
		if r.Rate > 0 {
			rated++
		}
	}
	if rated >= 2 {
		name := filepath.Join(dir, "throughput.png")
		save(name, Throughput(name, "Throughput against offered rate: "+runs[0].Workload, runs, false))
		if runs[0].SLO != "" {
			name = filepath.Join(dir, "goodput.png")
			save(name, Throughput(name, "Goodput against offered rate: "+runs[0].Workload, runs, true))
		}
	}
	return files, errors.Join(errs...)
}

// panel is the runs drawn on one set of CDF charts.
type panel struct {
	rate float64
	runs []*bench.Report
}

// panels splits a comparison swept over rates (runs in groups, several rates) into
// one panel per rate with a line per group; anything else is one panel.
func panels(runs []*bench.Report) []panel {
	var rates []float64
	grouped := false
	for _, r := range runs {
		grouped = grouped || r.Group != ""
		if !slices.Contains(rates, r.Rate) {
			rates = append(rates, r.Rate)
		}
	}
	if !grouped || len(rates) < 2 {
		return []panel{{runs: runs}}
	}
	var ps []panel
	for _, rate := range rates {
		p := panel{rate: rate}
		for _, r := range runs {
			if r.Rate == rate {
				p.runs = append(p.runs, r)
			}
		}
		ps = append(ps, p)
	}
	return ps
}

// seriesName names a run's line: its group in a per-rate panel, else its label.
func seriesName(r *bench.Report) string {
	if r.Group != "" {
		return r.Group
	}
	return r.Label
}

func classSeries(r *bench.Report) (ttft, itl []Series) {
	t, i := bench.Latencies(r.Results)
	ttft, itl = []Series{{"all", t}}, []Series{{"all", i}}
	for _, c := range r.Classes {
		t, i := bench.Latencies(onlyClass(r.Results, c.Class))
		ttft, itl = append(ttft, Series{c.Class, t}), append(itl, Series{c.Class, i})
	}
	return ttft, itl
}

// classNames lists the classes of runs in first-seen order; a single class is the
// same as the whole run, so none are returned then.
func classNames(runs []*bench.Report) []string {
	var names []string
	for _, r := range runs {
		for _, c := range r.Classes {
			if !slices.Contains(names, c.Class) {
				names = append(names, c.Class)
			}
		}
	}
	if len(names) < 2 {
		return nil
	}
	return names
}

func onlyClass(results []bench.Result, class string) []bench.Result {
	var out []bench.Result
	for _, r := range results {
		if r.Class == class {
			out = append(out, r)
		}
	}
	return out
}
