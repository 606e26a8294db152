package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A results file judged again: the table names the run, the new objectives'
// attainment and the goodput in modelled time; bad use gets an error naming it.
func TestBenchRescore(t *testing.T) {
	// One request per run, as bench writes it: TTFT 100 ms, 3 gaps, one of 90 ms.
	results := `{"command":["compare"],"runs":[{"label":"always-remote@2","workload":"trace","seed":1,"warmup_s":0,"started_at":"2026-12-01T00:00:00Z",
	"overall":{"class":"all","duration_s":10},"classes":[{"class":"fresh"}],
	"requests":[{"class":"fresh","start_s":0,"ttft_ms":100,"e2e_ms":200,"itl_ms":[5,5,90],"prompt_tokens":10,"output_tokens":4}]}]}`
	path := filepath.Join(t.TempDir(), "results.json")
	if err := os.WriteFile(path, []byte(results), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	// At time scale 0.25 the TTFT is 400 modelled ms and the TBT 360: tbt=300 fails it.
	if err := run(context.Background(), []string{"bench", "rescore", "--slo", "ttft=500,tbt=300", "--time-scale", "0.25", "--markdown", path},
		envOf(nil), &out, &errb); err != nil {
		t.Fatalf("rescore: %v (%s)", err, errb.String())
	}
	if s := out.String(); !strings.Contains(s, "| always-remote@2 | all | 1 | 0 | 0.025 |") || !strings.Contains(s, "ttft 100.0%, tbt 0.0%") {
		t.Errorf("markdown:\n%s", s)
	}
	for _, args := range [][]string{
		{"bench", "rescore", "--slo", "ttft=500"},
		{"bench", "rescore", path},
		{"bench", "rescore", "--slo", "ttft=500", "--time-scale", "-1", path},
		{"bench", "rescore", "--slo", "itl=5", path},
		{"bench", "rescore", "--slo", "ttft=5", filepath.Join(t.TempDir(), "missing.json")},
	} {
		out.Reset()
		if err := run(context.Background(), args, envOf(nil), &out, &errb); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// A sweep split over two files (one invocation per load): runs with the same
// deployment name join one curve, judged under the new SLO, in modelled time.
func TestBenchRescoreCapacityAcrossFiles(t *testing.T) {
	saved := func(group string, rate float64, ttfts ...int) string {
		var reqs []string
		for _, ms := range ttfts {
			reqs = append(reqs, fmt.Sprintf(`{"class":"c","start_s":0,"ttft_ms":%d,"e2e_ms":%d,"itl_ms":[5],"prompt_tokens":10,"output_tokens":2}`, ms, ms+5))
		}
		return fmt.Sprintf(`{"label":"%s rate=%g","group":"%s","workload":"mixed","rate":%g,"seed":1,"warmup_s":0,"started_at":"2026-12-01T00:00:00Z",
		"overall":{"class":"all","duration_s":10},"classes":[{"class":"c"}],"requests":[%s]}`, group, rate, group, rate, strings.Join(reqs, ","))
	}
	dir := t.TempDir()
	var paths []string
	for i, runs := range [][]string{
		{saved("aggregated", 2, 100, 100), saved("threshold", 2, 100, 100)},
		{saved("aggregated", 4, 100, 900), saved("threshold", 4, 100, 100)},
	} {
		p := filepath.Join(dir, fmt.Sprintf("r%d.json", i))
		if err := os.WriteFile(p, []byte(`{"command":["compare"],"runs":[`+strings.Join(runs, ",")+`]}`), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	var out, errb bytes.Buffer
	// At time scale 0.5 the TTFTs are 200 and 1800 modelled ms and the rates 1
	// and 2 per modelled second: aggregated meets ttft=500 for all at 1, half
	// at 2, so 90 % is crossed a fifth of the way, at 1.2.
	args := append([]string{"bench", "rescore", "--slo", "ttft=500", "--time-scale", "0.5", "--markdown"}, paths...)
	if err := run(context.Background(), args, envOf(nil), &out, &errb); err != nil {
		t.Fatalf("rescore: %v (%s)", err, errb.String())
	}
	for _, row := range []string{"| aggregated | 1.2 | 1 (best baseline) | 100.0% | 50.0% |", "| threshold | > 2 (max probed) | >= 1.67x | 100.0% | 100.0% |",
		"loads multiplied by the time scale 0.5"} {
		if !strings.Contains(out.String(), row) {
			t.Errorf("markdown lacks %q:\n%s", row, out.String())
		}
	}
	// Under a looser SLO the same runs read differently; as text this time.
	out.Reset()
	args = append([]string{"bench", "rescore", "--slo", "ttft=2000"}, paths...)
	if err := run(context.Background(), args, envOf(nil), &out, &errb); err != nil {
		t.Fatalf("rescore: %v", err)
	}
	if s := out.String(); !strings.Contains(s, "== capacity") || strings.Count(s, "> 4 (max probed)") != 2 {
		t.Errorf("text:\n%s", s)
	}
	// One file, one load per deployment: no curve, and stderr says why.
	out.Reset()
	errb.Reset()
	if err := run(context.Background(), []string{"bench", "rescore", "--slo", "ttft=500", paths[0]}, envOf(nil), &out, &errb); err != nil ||
		strings.Contains(out.String(), "capacity") || !strings.Contains(errb.String(), "no capacity read") {
		t.Errorf("one load: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
}
