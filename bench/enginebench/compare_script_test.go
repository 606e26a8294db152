package enginebench

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// fakeLlamaBench prints llama-bench's markdown table with fixed rates, so the
// harness's parsing and ratios can be checked without llama.cpp.
const fakeLlamaBench = `#!/bin/sh
echo "| model | size | params | backend | threads | test | t/s |"
echo "| --- | ---: | ---: | --- | ---: | ------------: | -------------------: |"
echo "| llama ?B all F32 | 1 MiB | 1 M | CPU | 1 | pp16 | 1000.00 ± 1.00 |"
echo "| llama ?B all F32 | 1 MiB | 1 M | CPU | 1 | tg4 | 10.00 ± 0.10 |"
echo ""
echo "build: abc1234 (4770)"
`

// scripts/llamacpp-compare.sh runs tandem's bench on the file and sets each cell
// against llama-bench's, the batched row against llama.cpp's one-sequence rate.
func TestCompareScript(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the harness is a bash script for Linux")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	llama := filepath.Join(dir, "llama")
	if err := os.MkdirAll(llama, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(llama, "llama-bench"), []byte(fakeLlamaBench), 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "tandem")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/tandem")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	s, _ := LookupShape("smoke")
	model := filepath.Join(dir, "smoke.gguf")
	if err := WriteModel(model, s, "q8_0", 1); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "../../scripts/llamacpp-compare.sh", llama, model)
	cmd.Env = append(os.Environ(), "TANDEM_BIN="+bin, "COMPARE_PROMPT=16", "COMPARE_GEN=4",
		"COMPARE_REPS=1", "COMPARE_THREADS=1", "COMPARE_BATCH=2")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("harness: %v\n%s", err, out)
	}
	text := string(out)
	if !strings.Contains(text, "llama.cpp: abc1234") {
		t.Errorf("llama.cpp's commit from its build line missing:\n%s", text)
	}
	row := regexp.MustCompile(`(?m)^\| smoke\.gguf \| 1 \| (\S+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+)x \|$`)
	got := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(text, -1) {
		got[m[1]] = true
		tr, _ := strconv.ParseFloat(m[2], 64)
		lr, _ := strconv.ParseFloat(m[3], 64)
		ratio, _ := strconv.ParseFloat(m[4], 64)
		want := map[string]float64{"pp16": 1000, "tg4": 10, "tg4x2": 10}[m[1]]
		if lr != want {
			t.Errorf("%s: llama.cpp rate %v, want %v", m[1], lr, want)
		}
		if !(tr > 0) || diff(ratio, tr/lr) > 0.006 {
			t.Errorf("%s: tandem %v, ratio %v, want %.2f", m[1], tr, ratio, tr/lr)
		}
	}
	for _, test := range []string{"pp16", "tg4", "tg4x2"} {
		if !got[test] {
			t.Errorf("no %s row:\n%s", test, text)
		}
	}
}

func diff(a, b float64) float64 {
	if a > b {
		return a - b
	}
	return b - a
}
