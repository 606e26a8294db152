package bench

import (
	"flag"
	"strings"
	"testing"
)

func tracePlanOf(t *testing.T, args ...string) (*Plan, error) {
	t.Helper()
	var o Options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o.RegisterFlags(fs)
	if err := fs.Parse(append([]string{"--url", "http://127.0.0.1:1", "--trace", testTrace, "--trace-limit", "20"}, args...)); err != nil {
		t.Fatal(err)
	}
	return o.Plan(false)
}

// A list of speedups is a sweep: one config per value, labelled as rates are,
// each replaying the same window with its gaps divided by its own speedup.
func TestTraceSpeedupList(t *testing.T) {
	p, err := tracePlanOf(t, "--trace-speedup", "1, 2,4")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(p.Labels, " "); got != "speedup=1 speedup=2 speedup=4" {
		t.Errorf("labels %q", got)
	}
	var last []float64
	for i, c := range p.Configs {
		if want := []float64{1, 2, 4}[i]; c.TraceSpeedup != want || !c.Scheduled {
			t.Errorf("config %d: speedup %g scheduled %v, want %g", i, c.TraceSpeedup, c.Scheduled, want)
		}
		wl, err := p.load(i)
		if err != nil {
			t.Fatal(err)
		}
		tr := wl.(*TraceReplay)
		last = append(last, tr.reqs[len(tr.reqs)-1].At.Seconds())
		if i > 0 && !strings.Contains(tr.Name(), "speedup ") {
			t.Errorf("config %d's workload %q does not name its speedup", i, tr.Name())
		}
	}
	if !(last[0] > 0) || !near(last[1], last[0]/2) || !near(last[2], last[0]/4) {
		t.Errorf("last arrival at each speedup: %v s; want t, t/2, t/4", last)
	}
	if p.Label(1, "aggregated ") != "aggregated speedup=2" {
		t.Errorf("label in a comparison: %q", p.Label(1, "aggregated "))
	}

	// One value is no sweep: the label and the report are as they always were.
	p, err = tracePlanOf(t, "--trace-speedup", "1.5")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Configs) != 1 || p.Labels[0] != "trace" || p.Configs[0].TraceSpeedup != 0 || p.Label(0, "aggregated ") != "aggregated" {
		t.Errorf("one speedup: labels %q, config %+v", p.Labels, p.Configs[0])
	}
	if wl, _ := p.NewLoad(); !strings.Contains(wl.Name(), "speedup 1.5") {
		t.Errorf("workload %q", wl.Name())
	}

	for _, c := range []struct{ list, want string }{
		{"1,x", `--trace-speedup "x"`},
		{"1,2,1", "--trace-speedup 1 is given twice"},
		{" , ", "--trace-speedup is empty"},
		{"1,-1", "--trace-speedup -1 must be"},
	} {
		if _, err := tracePlanOf(t, "--trace-speedup", c.list); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--trace-speedup %q: %v, want an error with %q", c.list, err, c.want)
		}
	}
}
