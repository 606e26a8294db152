package main

import (
	"bytes"
	"context"
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
