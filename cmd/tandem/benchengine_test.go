package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// make-model writes a file that bench engine then measures, profile included.
func TestBenchEngineOnAMadeModel(t *testing.T) {
	dir := t.TempDir()
	model, prof := filepath.Join(dir, "smoke.gguf"), filepath.Join(dir, "cpu.pprof")
	var out, errb bytes.Buffer
	ctx := context.Background()
	if err := run(ctx, []string{"bench", "make-model", "--shape", "smoke", "--type", "q8_0", model}, envOf(nil), &out, &errb); err != nil {
		t.Fatalf("make-model: %v (%s)", err, errb.String())
	}
	out.Reset()
	args := []string{"bench", "engine", "--model", model, "--threads", "1", "--prompt", "32", "--gen", "4", "--batch", "2",
		"--reps", "1", "--cpuprofile", prof}
	if err := run(ctx, args, envOf(nil), &out, &errb); err != nil {
		t.Fatalf("engine: %v (%s)", err, errb.String())
	}
	for _, want := range []string{"| 1 | pp32 |", "| 1 | tg4 |", "| 1 | tg4 x2 |", "smoke-random-q8_0 Q8_0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
	if st, err := os.Stat(prof); err != nil || st.Size() == 0 {
		t.Errorf("profile: %v", err)
	}
	for _, bad := range [][]string{
		{"bench", "make-model", "--type", "q9", filepath.Join(dir, "x.gguf")},
		{"bench", "make-model", "--shape", "gpt5", filepath.Join(dir, "x.gguf")},
		{"bench", "make-model"},
		{"bench", "engine", "--threads", "0", "--model", model},
		{"bench", "engine"},
	} {
		if err := run(ctx, bad, envOf(nil), &out, &errb); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
