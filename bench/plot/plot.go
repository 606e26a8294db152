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
// achieved and (if an SLO was given) the goodput, with the ideal y = x for
// reference.
func Throughput(path, title string, runs []*bench.Report) error {
	var got, good, ideal plotter.XYs
	for _, r := range runs {
		if r.Rate <= 0 {
			continue
		}
		got = append(got, plotter.XY{X: r.Rate, Y: r.Overall.RequestThroughput})
		ideal = append(ideal, plotter.XY{X: r.Rate, Y: r.Rate})
		if r.Overall.Goodput != nil {
			good = append(good, plotter.XY{X: r.Rate, Y: *r.Overall.Goodput})
		}
	}
	if len(got) < 2 {
		return errors.New("plot: throughput against rate needs a sweep of at least two rates")
	}
	p := gplot.New()
	p.Title.Text = title
	p.X.Label.Text = "offered rate (requests/s, Poisson)"
	p.Y.Label.Text = "requests/s"
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = false, false
	args := []any{"offered (ideal)", ideal, "achieved", got}
	if len(good) > 0 {
		args = append(args, "goodput ("+runs[0].SLO+")", good)
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
// with several classes), one TTFT CDF per class when there are several runs, and
// throughput.png for a rate sweep.
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
	var ttft, itl []Series
	if len(runs) == 1 && len(runs[0].Classes) > 1 {
		ttft, itl = classSeries(runs[0])
	} else {
		for _, r := range runs {
			t, i := bench.Latencies(r.Results)
			ttft, itl = append(ttft, Series{r.Label, t}), append(itl, Series{r.Label, i})
		}
	}
	name := filepath.Join(dir, "ttft_cdf.png")
	save(name, CDF(name, "TTFT: time to first token", "TTFT (ms, log scale)", ttft))
	name = filepath.Join(dir, "itl_cdf.png")
	save(name, CDF(name, "ITL: gaps between streamed chunks, pooled", "ITL (ms, log scale)", itl))
	if len(runs) > 1 {
		for _, class := range classNames(runs) {
			var ts, is []Series
			for _, r := range runs {
				t, i := bench.Latencies(onlyClass(r.Results, class))
				ts, is = append(ts, Series{r.Label, t}), append(is, Series{r.Label, i})
			}
			name = filepath.Join(dir, "ttft_cdf_"+fileName(class)+".png")
			save(name, CDF(name, "TTFT, class "+class, "TTFT (ms, log scale)", ts))
			name = filepath.Join(dir, "itl_cdf_"+fileName(class)+".png")
			save(name, CDF(name, "ITL, class "+class, "ITL (ms, log scale)", is))
		}
	}
	rated := 0
	for _, r := range runs {
		if r.Rate > 0 {
			rated++
		}
	}
	if rated >= 2 {
		name = filepath.Join(dir, "throughput.png")
		save(name, Throughput(name, "Throughput against offered rate: "+runs[0].Workload, runs))
	}
	return files, errors.Join(errs...)
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
