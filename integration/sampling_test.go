package integration

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// Through the OpenAI SDK against stories260K on the native engine: logit_bias -100
// bans, the penalties lower a repeated token's logprob by exactly their sum, and
// min_p never draws from the tail it cuts.
func TestSamplingControlsChangeOutput(t *testing.T) {
	_, url := startUpWith(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	complete := func(p openai.CompletionNewParams, opts ...option.RequestOption) openai.CompletionChoice {
		t.Helper()
		p.Model = "stories260K"
		p.Prompt = openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}
		c, err := client.Completions.New(ctx, p, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return c.Choices[0]
	}

	// Every token but 403 ("▁Once") banned: greedy can only say it.
	ban := map[string]int64{}
	for id := range 512 {
		if id != 403 {
			ban[strconv.Itoa(id)] = -100
		}
	}
	if c := complete(openai.CompletionNewParams{MaxTokens: openai.Int(3), Temperature: openai.Float(0), LogitBias: ban}); c.Text != " Once Once Once" {
		t.Errorf("with all but token 403 banned: %q", c.Text)
	}

	// Token 403 biased up is drawn first and stays likely; the penalties then lower
	// it at the second position by 0.5 + 0.75 against any other token.
	base := openai.CompletionNewParams{MaxTokens: openai.Int(2), Temperature: openai.Float(0), Logprobs: openai.Int(5),
		LogitBias: map[string]int64{"403": 30}}
	plain := complete(base)
	pen := base
	pen.PresencePenalty, pen.FrequencyPenalty = openai.Float(0.5), openai.Float(0.75)
	penalized := complete(pen)
	once := plain.Logprobs.Tokens[0]
	if penalized.Logprobs.Tokens[0] != once || strings.TrimSpace(once) != "Once" {
		t.Fatalf("first tokens %q and %q, want Once", once, penalized.Logprobs.Tokens[0])
	}
	a, b := plain.Logprobs.TopLogprobs[1], penalized.Logprobs.TopLogprobs[1]
	checked := false
	for other, lp := range a {
		if plp, ok := b[other]; ok && other != once {
			if _, ok := b[once]; !ok {
				break
			}
			if got := (a[once] - lp) - (b[once] - plp); math.Abs(got-1.25) > 1e-3 {
				t.Errorf("the repeated token fell by %g against %q, want 1.25", got, other)
			}
			checked = true
			break
		}
	}
	if !checked {
		t.Fatalf("no token to compare with at the second position: %v / %v", a, b)
	}

	// min_p 0.3 at temperature 2 draws nothing below 0.3 of the likeliest's
	// probability at that temperature; without it some draw of 30 does.
	tail := 0
	for seed := range int64(30) {
		for _, minP := range []float64{0, 0.3} {
			c := complete(openai.CompletionNewParams{MaxTokens: openai.Int(1), Temperature: openai.Float(2), Seed: openai.Int(seed), Logprobs: openai.Int(5)},
				option.WithJSONSet("min_p", minP))
			top := math.Inf(-1)
			for _, lp := range c.Logprobs.TopLogprobs[0] {
				top = max(top, lp)
			}
			below := c.Logprobs.TokenLogprobs[0] < top+2*math.Log(0.3)-1e-3
			if minP > 0 && below {
				t.Errorf("seed %d: min_p drew %q at %g, below the cut %g", seed, c.Logprobs.Tokens[0], c.Logprobs.TokenLogprobs[0], top+2*math.Log(0.3))
			}
			if minP == 0 && below {
				tail++
			}
		}
	}
	if tail == 0 {
		t.Error("no draw without min_p fell in the tail; the test shows nothing")
	}
}
