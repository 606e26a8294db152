package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A two-request trace priced on the h100 profile: one table per cache mode, the
// second prompt's first block credited by the unbounded cache, the speedup that
// fills the devices, and what the bound leaves out; bad use is an error naming it.
func TestBenchBound(t *testing.T) {
	trace := `{"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [0, 1]}
{"timestamp": 1000, "input_length": 1024, "output_length": 10, "hash_ids": [0, 2]}
`
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(path, []byte(trace), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	args := []string{"bench", "bound", "--trace", path, "--sim-profile", "h100-llama8b", "--devices", "2", "--trace-speedup", "1,2",
		"--prefix-cache", "none,unbounded", "--max-utilisation", "0.8", "--ttft-slo-ms", "30000", "--markdown"}
	if err := run(context.Background(), args, envOf(nil), &out, &errb); err != nil {
		t.Fatalf("bound: %v (%s)", err, errb.String())
	}
	s := out.String()
	for _, want := range []string{
		"prefix cache none: 0.0 % of prompt tokens credited; 2 requests over 1.0 s at speedup 1 (2.00 requests/s); sim profile h100-llama8b, 2 devices",
		"prefix cache unbounded: 25.0 % of prompt tokens credited",
		"| speedup | requests/s | prefill | decode | total | utilisation |", "| 2 | 4.00 |",
		"utilisation 1 of 2 devices at speedup", "no placement serves more in steady state", "utilisation 0.8 of 2 devices",
		"up to speedup +Inf", "Not a prediction: the bound ignores queueing",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	for _, bad := range [][]string{
		{"bench", "bound"},
		{"bench", "bound", "--trace", path, "--prefix-cache", "lru"},
		{"bench", "bound", "--trace", path, "--devices", "0"},
		{"bench", "bound", "--trace", path, "--max-utilisation", "1.5"},
		{"bench", "bound", "--trace", path, "--sim-profile", "a100"},
		{"bench", "bound", "--trace", path, "--trace-speedup", "0"},
		{"bench", "bound", "--trace", filepath.Join(t.TempDir(), "missing.jsonl")},
	} {
		out.Reset()
		if err := run(context.Background(), bad, envOf(nil), &out, &errb); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
