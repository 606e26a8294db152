package bench

import (
	"strings"
	"testing"
)

// run makes a judged run of a deployment at a rate.
func judged(group string, rate, att float64) *Report {
	return &Report{Group: group, Label: group, Rate: rate, SLO: "ttft=500", Overall: Summary{Attainment: map[string]float64{"all": att}}}
}

func capacityOf(t *testing.T, tab *CapacityTable, dep string) Capacity {
	t.Helper()
	for _, r := range tab.Rows {
		if r.Deployment == dep {
			return r
		}
	}
	t.Fatalf("no row %q in %+v", dep, tab.Rows)
	return Capacity{}
}

func TestCapacityInterpolatesAndBounds(t *testing.T) {
	runs := []*Report{
		// Probed out of order: read lowest load first. 95 % at 2, 75 % at 4:
		// 90 % is a quarter of the way, at 2.5.
		judged("aggregated", 4, 0.75), judged("aggregated", 2, 0.95), judged("aggregated", 1, 1),
		judged("threshold", 1, 1), judged("threshold", 2, 0.99), judged("threshold", 4, 0.9),
		judged("always-remote", 1, 0.5), judged("always-remote", 2, 0.2), judged("always-remote", 4, 0),
		// Below at 2, meets again at 4: the first crossing, with a note.
		judged("cost", 1, 0.92), judged("cost", 2, 0.88), judged("cost", 4, 0.91),
		// A closed loop has no load: left out.
		{Group: "cost", Concurrency: 4, SLO: "ttft=500", Overall: Summary{Attainment: map[string]float64{"all": 1}}},
	}
	tab, err := Capacities(runs, 0.9, 1)
	if err != nil || tab == nil {
		t.Fatalf("Capacities: %v, %v", tab, err)
	}
	if tab.Unit != UnitRate || tab.Baseline != "aggregated" || tab.SLO != "ttft=500" {
		t.Errorf("unit %q baseline %q slo %q", tab.Unit, tab.Baseline, tab.SLO)
	}
	agg := capacityOf(t, tab, "aggregated")
	if !near(agg.Value, 2.5) || agg.Bound != "" || agg.Ratio != "1 (best baseline)" || agg.Points[0].Load != 1 {
		t.Errorf("aggregated: %+v", agg)
	}
	// Exactly at the target at the highest load: it met it everywhere.
	thr := capacityOf(t, tab, "threshold")
	if thr.Value != 4 || thr.Bound != ">" || thr.Ratio != ">= 1.60x" {
		t.Errorf("threshold: %+v", thr)
	}
	rem := capacityOf(t, tab, "always-remote")
	if rem.Value != 1 || rem.Bound != "<" || rem.Ratio != "<= 0.40x" {
		t.Errorf("always-remote: %+v", rem)
	}
	cost := capacityOf(t, tab, "cost")
	if !near(cost.Value, 1.5) || len(cost.Points) != 3 || !strings.Contains(cost.Note, "not monotone: below the target at 2, meets it again at 4") ||
		cost.Ratio != "0.60x" || !near(*cost.RatioValue, 0.6) {
		t.Errorf("cost: %+v", cost)
	}

	var text, md strings.Builder
	if err := WriteCapacity(&text, tab); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"SLO attainment >= 90% (ttft=500)", "met @1", "met @4", "> 4 (max probed)", "< 1 (min probed)",
		"best baseline (aggregated..., always-remote...): aggregated", "cost: not monotone"} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("text table lacks %q:\n%s", s, text.String())
		}
	}
	WriteCapacityMarkdown(&md, tab)
	if !strings.Contains(md.String(), "| aggregated | 2.5 | 1 (best baseline) | 100.0% | 95.0% | 75.0% |") {
		t.Errorf("markdown:\n%s", md.String())
	}
}

// The best baseline can be a bound too: a deployment above it is then "?",
// one exact below it a bound.
func TestCapacityRatioToABoundedBaseline(t *testing.T) {
	tab, err := Capacities([]*Report{
		judged("always-remote@2", 1, 1), judged("always-remote@2", 2, 1),
		judged("aggregated", 1, 1), judged("aggregated", 2, 0.5),
		judged("threshold", 1, 1), judged("threshold", 2, 1),
		judged("cost", 1, 0.95), judged("cost", 2, 0.85),
	}, 0.9, 1)
	if err != nil {
		t.Fatal(err)
	}
	if tab.Baseline != "always-remote@2" {
		t.Errorf("best baseline %q", tab.Baseline)
	}
	if r := capacityOf(t, tab, "threshold").Ratio; r != "?" {
		t.Errorf("threshold's ratio %q", r)
	}
	if r := capacityOf(t, tab, "cost"); !near(r.Value, 1.5) || r.Ratio != "<= 0.75x" {
		t.Errorf("cost %+v", r)
	}
}

func TestCapacityNothingToRead(t *testing.T) {
	one := []*Report{judged("aggregated", 1, 1), judged("threshold", 1, 0.5)}
	if tab, err := Capacities(one, 0.9, 1); tab != nil || err != nil {
		t.Errorf("one load each: %+v, %v; want no table", tab, err)
	}
	two := append(one, judged("aggregated", 2, 1))
	if tab, err := Capacities(two, 0, 1); tab != nil || err != nil {
		t.Errorf("target 0: %+v, %v; want no table", tab, err)
	}
	unjudged := []*Report{{Group: "a", Rate: 1}, {Group: "a", Rate: 2}}
	if tab, err := Capacities(unjudged, 0.9, 1); tab != nil || err != nil {
		t.Errorf("no SLO: %+v, %v; want no table", tab, err)
	}
	mixed := append(two, &Report{Group: "aggregated", Scheduled: true, SLO: "ttft=500", Overall: Summary{Attainment: map[string]float64{"all": 1}}})
	if _, err := Capacities(mixed, 0.9, 1); err == nil || !strings.Contains(err.Error(), "mix loads") {
		t.Errorf("rates and speedups mixed: %v", err)
	}
	other := judged("aggregated", 3, 1)
	other.SLO = "ttft=100"
	if _, err := Capacities(append(two, other), 0.9, 1); err == nil || !strings.Contains(err.Error(), "different SLOs") {
		t.Errorf("two SLOs: %v", err)
	}
	if _, err := Capacities(two, 1.5, 1); err == nil {
		t.Error("target 1.5 accepted")
	}
}

// A trace run's load is its speedup: the report's own in a sweep, else the
// one its workload's name gives (1 when it gives none), times the load scale.
func TestCapacityTraceLoads(t *testing.T) {
	mk := func(name string, speedup, att float64) *Report {
		return &Report{Group: "aggregated", Workload: name, Scheduled: true, TraceSpeedup: speedup, SLO: "ttft=500",
			Overall: Summary{Attainment: map[string]float64{"all": att}}}
	}
	tab, err := Capacities([]*Report{
		mk("trace t.jsonl [0:100]", 0, 1),
		mk("trace t.jsonl [0:100], speedup 2, token scale 0.5 (blocks of 256)", 0, 0.8),
		mk("trace t.jsonl [0:100], speedup 3", 3, 0.6),
	}, 0.9, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	r := tab.Rows[0]
	if tab.Unit != UnitSpeedup || len(r.Points) != 3 || r.Points[0].Load != 0.5 || r.Points[1].Load != 1 || r.Points[2].Load != 1.5 || !near(r.Value, 0.75) {
		t.Errorf("unit %q row %+v", tab.Unit, r)
	}
	var text strings.Builder
	WriteCapacity(&text, tab)
	if !strings.Contains(text.String(), "loads multiplied by the time scale 0.5") {
		t.Errorf("table:\n%s", text.String())
	}
}
