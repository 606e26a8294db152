package plot

import (
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/bench"
)

func fakeRun(label string, rate float64, scale time.Duration) *bench.Report {
	var rs []bench.Result
	for i := range 50 {
		class := "short"
		if i%5 == 0 {
			class = "long"
		}
		rs = append(rs, bench.Result{
			Class: class, TTFT: time.Duration(i+1) * scale, E2E: time.Duration(i+40) * scale, OutputTokens: 8,
			ITL: []time.Duration{scale, 2 * scale, 3 * scale},
		})
	}
	slo, _ := bench.ParseSLO("ttft=20")
	r := &bench.Report{Label: label, Rate: rate, Workload: "test", SLO: slo.String(), Results: rs}
	r.Overall = bench.Summarize("all", rs, 10*time.Second, slo)
	for _, c := range []string{"short", "long"} {
		var only []bench.Result
		for _, x := range rs {
			if x.Class == c {
				only = append(only, x)
			}
		}
		r.Classes = append(r.Classes, bench.Summarize(c, only, 10*time.Second, slo))
	}
	return r
}

func checkPNG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s is not a PNG: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() < 500 || b.Dy() < 300 {
		t.Errorf("%s is only %v", path, b)
	}
}

func TestReportsForASweep(t *testing.T) {
	dir := t.TempDir()
	runs := []*bench.Report{fakeRun("rate=1", 1, time.Millisecond), fakeRun("rate=2", 2, 2*time.Millisecond)}
	files, err := Reports(dir, runs)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ttft_cdf.png", "itl_cdf.png", "ttft_cdf_short.png", "itl_cdf_short.png", "ttft_cdf_long.png", "itl_cdf_long.png",
		"throughput.png", "goodput.png"}
	for _, w := range want {
		if !slices.Contains(files, filepath.Join(dir, w)) {
			t.Errorf("%s not written (wrote %v)", w, files)
			continue
		}
		checkPNG(t, filepath.Join(dir, w))
	}
}

func TestReportsForOneRunDrawsItsClasses(t *testing.T) {
	dir := t.TempDir()
	files, err := Reports(dir, []*bench.Report{fakeRun("concurrency=4", 0, time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Errorf("wrote %v; want the TTFT and ITL CDFs only (no sweep)", files)
	}
}

func TestCDFPoints(t *testing.T) {
	pts := cdfPoints([]float64{3, 1, 2, 0})
	if len(pts) != 4 || pts[0].X != 1e-3 || pts[0].Y != 0.25 || pts[3].X != 3 || pts[3].Y != 1 {
		t.Errorf("cdfPoints = %v", pts)
	}
	many := make([]float64, 10*maxPoints+7)
	for i := range many {
		many[i] = float64(i + 1)
	}
	pts = cdfPoints(many)
	if len(pts) > maxPoints+2 || pts[len(pts)-1].Y != 1 {
		t.Errorf("%d points, last %v", len(pts), pts[len(pts)-1])
	}
	if err := CDF(filepath.Join(t.TempDir(), "x.png"), "empty", "ms", []Series{{"a", nil}}); err == nil {
		t.Error("CDF of nothing succeeded")
	}
}

func TestLogTicksLabelOneTwoFive(t *testing.T) {
	var labels []string
	for _, tk := range (logTicks{}).Ticks(3, 120) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if !slices.Equal(labels, []string{"5", "10", "20", "50", "100"}) {
		t.Errorf("labels %v", labels)
	}
}

func TestPanelsSplitAComparisonSweepByRate(t *testing.T) {
	var runs []*bench.Report
	for _, g := range []string{"aggregated", "threshold"} {
		for _, rate := range []float64{4, 8} {
			runs = append(runs, &bench.Report{Label: fmt.Sprintf("%s rate=%g", g, rate), Group: g, Rate: rate})
		}
	}
	ps := panels(runs)
	if len(ps) != 2 || ps[0].rate != 4 || ps[1].rate != 8 || len(ps[0].runs) != 2 ||
		seriesName(ps[0].runs[0]) != "aggregated" || seriesName(ps[0].runs[1]) != "threshold" {
		t.Errorf("panels = %+v", ps)
	}
	// A plain sweep (no groups) stays on one chart, a line per rate.
	for _, r := range runs {
		r.Group = ""
	}
	if ps := panels(runs); len(ps) != 1 || len(ps[0].runs) != 4 || seriesName(ps[0].runs[0]) != "aggregated rate=4" {
		t.Errorf("panels of a plain sweep = %+v", ps)
	}
}
