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
		"prefix cache none: 0.0 % of prompt tokens credited; 2 requests over 1.0 s at speedup 1 (2.00 requests/s); sim profile h100-llama8b (8192 tokens a step at most), 2 devices",
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

// A mix is priced by rate: its table in requests/s, the rate that fills the
// devices, and what a run as short as --duration can read above it; flags of the
// trace's and a cache credit for fresh prompts are errors naming them.
func TestBenchBoundMix(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"bench", "bound", "--mix", "0.8:64/64,0.2:2048/64", "--rate", "200,250", "--sim-max-batched-tokens", "2048",
		"--duration", "5s", "--ttft-slo-ms", "2000"}
	if err := run(context.Background(), args, envOf(nil), &out, &errb); err != nil {
		t.Fatalf("bound: %v (%s)", err, errb.String())
	}
	s := out.String()
	for _, want := range []string{"mix 0.8:64/64,0.2:2048/64:", "(2048 tokens a step at most), 4 devices",
		"utilisation 1 of 4 devices at", "requests/s; ", "a run of 5 s of arrivals is done on 4 devices"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	for _, bad := range [][]string{
		{"bench", "bound", "--mix", "0.8:64/64"},
		{"bench", "bound", "--mix", "0.8:64/64", "--rate", "0"},
		{"bench", "bound", "--mix", "0.8:64/64", "--rate", "x"},
		{"bench", "bound", "--mix", "0.8:64", "--rate", "10"},
		{"bench", "bound", "--mix", "0.8:64/64", "--rate", "10", "--trace-speedup", "2"},
		{"bench", "bound", "--mix", "0.8:64/64", "--rate", "10", "--prefix-cache", "unbounded"},
		{"bench", "bound", "--mix", "0.8:64/64", "--rate", "10", "--trace", "x.jsonl"},
		{"bench", "bound", "--mix", "0.8:64/64", "--rate", "10", "--sim-max-batched-tokens", "-1"},
		{"bench", "bound", "--trace", "x.jsonl", "--rate", "10"},
	} {
		out.Reset()
		errb.Reset()
		if err := run(context.Background(), bad, envOf(nil), &out, &errb); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
