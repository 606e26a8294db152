package frontend

import (
	"context"
	"slices"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// The SDK's penalties and logit bias, and vLLM's repetition_penalty, min_p,
// stop_token_ids and top_k, reach the backend in the request's sampling parameters.
func TestSDKSamplingControlsReachBackend(t *testing.T) {
	c, b, _ := sdkSetup(t, nil)
	_, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:            "tandem-test",
		Messages:         []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")},
		PresencePenalty:  openai.Float(0.5),
		FrequencyPenalty: openai.Float(-0.25),
		LogitBias:        map[string]int64{"15339": -100, "9906": 3},
	}, option.WithJSONSet("repetition_penalty", 1.25), option.WithJSONSet("min_p", 0.125), option.WithJSONSet("stop_token_ids", []int{42}),
		option.WithJSONSet("top_k", 40))
	if err != nil {
		t.Fatal(err)
	}
	sp := b.reqs[0].GetSampling()
	if sp.GetPresencePenalty() != 0.5 || sp.GetFrequencyPenalty() != -0.25 || sp.GetRepetitionPenalty() != 1.25 || sp.GetMinP() != 0.125 ||
		sp.GetTopK() != 40 {
		t.Errorf("sampling %v", sp)
	}
	if lb := sp.GetLogitBias(); len(lb) != 2 || lb[15339] != -100 || lb[9906] != 3 {
		t.Errorf("logit bias %v", lb)
	}
	if stops := b.reqs[0].GetStopTokenIds(); !slices.Contains(stops, 42) || !slices.Contains(stops, testTokenizer(t).EOS()) {
		t.Errorf("stop tokens %v, want 42 beside EOS", stops)
	}
	// Completions take the same fields.
	_, err = c.Completions.New(context.Background(), openai.CompletionNewParams{
		Model: "tandem-test", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")},
		PresencePenalty: openai.Float(1), LogitBias: map[string]int64{"7": 5},
	})
	if err != nil {
		t.Fatal(err)
	}
	if sp := b.reqs[1].GetSampling(); sp.GetPresencePenalty() != 1 || sp.GetLogitBias()[7] != 5 {
		t.Errorf("completion sampling %v", sp)
	}
}
