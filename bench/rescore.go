package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// ReadFile reads a results file that tandem bench wrote with --json (or compare's
// results.json).
func ReadFile(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("bench: %s: %w", path, err)
	}
	return &f, nil
}

// Rescore judges the runs of a results file again under slo, without running
// them again: one run can then be read under several published objectives
// (Dynamo's, the Mooncake paper's). timeScale converts a simulated run back to
// modelled time: with the sim's --sim-time-scale 0.25, every latency and the
// window are divided by 0.25, so slo and the tables are in modelled
// milliseconds and requests per modelled second. 1 leaves them as measured.
func Rescore(f *File, slo SLO, timeScale float64) ([]*Report, error) {
	if !(timeScale > 0) {
		return nil, fmt.Errorf("bench: time scale %g: want a positive number", timeScale)
	}
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) / timeScale) }
	var out []*Report
	for i, r := range f.Runs {
		if len(r.Requests) == 0 {
			return nil, fmt.Errorf("bench: run %d (%q) has no per-request records (written with --per-request=false?)", i, r.Label)
		}
		c := *r
		c.RestoreResults()
		for j := range c.Results {
			res := &c.Results[j]
			res.Start, res.TTFT, res.E2E = scale(res.Start), scale(res.TTFT), scale(res.E2E)
			for k, g := range res.ITL {
				res.ITL[k] = scale(g)
			}
		}
		var order []string
		for _, s := range r.Classes {
			order = append(order, s.Class)
		}
		c.SLO = slo.String()
		c.summarize(slo, scale(time.Duration(r.Overall.DurationS*float64(time.Second))), order)
		out = append(out, &c)
	}
	return out, nil
}
