package bench

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A run saved as a sim run at time scale 0.5 and read again under a new SLO:
// latencies double back to modelled time, the window too, and only the
// requests meeting the new objectives count.
func TestRescoreJudgesSavedRunsInModelledTime(t *testing.T) {
	slo, _ := ParseSLO("ttft=200,tpot=100")
	rep := &Report{Label: "aggregated", Results: sample()}
	rep.summarize(slo, 2*time.Second, nil)
	path := filepath.Join(t.TempDir(), "results.json")
	if err := WriteJSON(path, []*Report{rep}, []string{"test"}, true); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Modelled: TTFTs 200, 600 and 100 ms, TPOT 200 ms, TBT 200 ms.
	strict, _ := ParseSLO("ttft=250")
	runs, err := Rescore(f, strict, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	o := runs[0].Overall
	if o.DurationS != 4 || !near(o.TTFT.Max, 600) || *o.GoodRequests != 2 || !near(*o.Goodput, 0.5) {
		t.Errorf("rescored: window %v s, TTFT max %v, good %d (%v/s); want 4 s, 600, 2 (0.5/s)", o.DurationS, o.TTFT.Max, *o.GoodRequests, *o.Goodput)
	}
	if runs[0].SLO != "ttft=250" || runs[0].Label != "aggregated" || len(runs[0].Classes) != 2 {
		t.Errorf("run %q slo %q classes %d", runs[0].Label, runs[0].SLO, len(runs[0].Classes))
	}
	tbt, _ := ParseSLO("tbt=150")
	runs, _ = Rescore(f, tbt, 0.5)
	if g := *runs[0].Overall.GoodRequests; g != 1 { // only the one-token answer: no gap at all
		t.Errorf("tbt=150 at modelled 200 ms gaps: %d good, want 1", g)
	}
	if f.Runs[0].Overall.DurationS != 2 || !near(f.Runs[0].Overall.TTFT.Max, 300) {
		t.Error("Rescore changed the file's own runs")
	}
	if _, err := Rescore(f, strict, 0); err == nil {
		t.Error("time scale 0 accepted")
	}
	f.Runs[0].Requests = nil
	if _, err := Rescore(f, strict, 1); err == nil || !strings.Contains(err.Error(), "per-request") {
		t.Errorf("a file without per-request records: %v", err)
	}
}
