package integration

import (
	"cmp"
	"slices"
	"strings"
	"testing"
)

// best_of on the native engine (the random tiny model): candidates are choices with
// seeds seed+i, so n=4 with the same seed shows all four best_of=4 drew; best_of
// returns the two with the highest cumulative logprob, best first, and bills all
// four. The candidates share the prompt's prefill as n's choices do: the worker's
// prefix cache hits grow by the prompt's full blocks for each candidate after the
// first.
func TestBestOf(t *testing.T) {
	dec := startService(t, "decode", "--listen", "127.0.0.1:0", "--id", "agg-bo", "--mode", "aggregated")
	rtr := startService(t, "router", "--listen", "127.0.0.1:0", "--decode-workers", dec)
	fe := startService(t, "frontend", "--listen", "127.0.0.1:0", "--router", rtr)
	waitHealthy(t, fe)
	url := "http://" + fe
	prompt := strings.Repeat("The little dog ran to the park and played with a red ball all day long. ", 6)
	req := func(extra map[string]any) completionJSON {
		body := map[string]any{"prompt": prompt, "max_tokens": 12, "temperature": 1, "seed": 21, "logprobs": 0}
		for k, v := range extra {
			body[k] = v
		}
		return postEcho(t, url, body)
	}
	all := req(map[string]any{"n": 4})
	sums := make([]float64, 4)
	for i, c := range all.Choices {
		for _, lp := range c.Logprobs.TokenLogprobs {
			sums[i] += *lp
		}
	}
	order := []int{0, 1, 2, 3}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(sums[b], sums[a]) })
	if all.Choices[order[0]].Text == all.Choices[order[1]].Text {
		t.Fatalf("the two likeliest candidates say the same %q; the test would show nothing", all.Choices[order[0]].Text)
	}

	before, _ := metricValue(dec, "tandem_prefix_cache_hits_total")
	best := req(map[string]any{"n": 2, "best_of": 4})
	after, _ := metricValue(dec, "tandem_prefix_cache_hits_total")
	if len(best.Choices) != 2 {
		t.Fatalf("%d choices, want 2", len(best.Choices))
	}
	for j, c := range best.Choices {
		if want := all.Choices[order[j]].Text; c.Index != j || c.Text != want {
			t.Errorf("choice %d: index %d %q, want candidate %d's %q (cumulative logprobs %v)", j, c.Index, c.Text, order[j], want, sums)
		}
	}
	if best.Usage.CompletionTokens != all.Usage.CompletionTokens || best.Usage.PromptTokens != all.Usage.PromptTokens {
		t.Errorf("usage %+v, want %+v (every candidate billed, the prompt once)", best.Usage, all.Usage)
	}
	// The first candidate prefills; the three others reuse every full block but
	// the one holding the last prompt token.
	if want := float64(3 * ((best.Usage.PromptTokens - 1) / 16 * 16)); best.Usage.PromptTokens < 64 || after-before < want {
		t.Errorf("prompt of %d tokens, best_of=4: prefix cache hits grew by %g tokens, want at least %g",
			best.Usage.PromptTokens, after-before, want)
	}
}
