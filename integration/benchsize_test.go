package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The default model, stories260K, has a 512-token vocabulary and a 2,048-token
// context. bench's shared-prefix defaults (a 512-token system prompt, 4 turns of
// 256 tokens and 64-token answers) used to be built in cl100k tokens, five times
// as many of stories260K's, and every request was refused as too long. Sized in
// the served model's tokens they fit, and the first turns are exactly the tokens
// asked for; a workload that cannot fit is refused before any request, saying
// which flags to lower.
func TestBenchSizesPromptsForTheServedModel(t *testing.T) {
	_, url := startUpWith(t, nil) // the default model
	bench := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		b, err := exec.CommandContext(ctx, tandemBin, append([]string{"bench", "--url", url}, args...)...).CombinedOutput()
		return string(b), err
	}
	out := filepath.Join(t.TempDir(), "sp.json")
	log, err := bench("--workload", "shared-prefix", "--requests", "12", "--conversations", "4", "--json", out)
	if err != nil {
		t.Fatalf("shared-prefix defaults on stories260K: %v\n%s", err, log)
	}
	if !strings.Contains(log, "prompts sized in stories260K's tokens") {
		t.Errorf("bench does not say how it sized the prompts:\n%s", log)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Runs []struct {
			Overall struct {
				Completed, Failed int
			} `json:"overall"`
			Classes []struct {
				Class       string `json:"class"`
				Completed   int    `json:"completed"`
				InputTokens int    `json:"input_tokens"`
			} `json:"classes"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(raw, &f); err != nil || len(f.Runs) != 1 {
		t.Fatalf("JSON: %v\n%s", err, raw)
	}
	r := f.Runs[0]
	if r.Overall.Completed != 12 || r.Overall.Failed != 0 {
		t.Fatalf("%d completed, %d failed of 12:\n%s", r.Overall.Completed, r.Overall.Failed, log)
	}
	// A first turn is the system prompt and one question, flattened for
	// /v1/completions with a blank line between: 512 + 256 tokens, and the
	// separator's.
	for _, c := range r.Classes {
		if c.Class == "turn-1" && (c.Completed == 0 || c.InputTokens/c.Completed < 768 || c.InputTokens/c.Completed > 772) {
			t.Errorf("turn-1: %d prompt tokens over %d requests; want 768 and the separator's each", c.InputTokens, c.Completed)
		}
	}

	log, err = bench("--workload", "shared-prefix", "--isl", "600", "--requests", "4")
	if err == nil || !strings.Contains(log, "over its context length of 2048 tokens") || !strings.Contains(log, "lower --prefix-len, --isl, --osl or --turns") {
		t.Errorf("a workload too long for the context: %v\n%s", err, log)
	}
}
