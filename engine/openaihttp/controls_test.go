package openaihttp_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/openaihttp"
	"github.com/tandem-serve/tandem/internal/testutil"
	"github.com/tandem-serve/tandem/internal/testutil/fakeengine"
)

// Penalties, logit bias and min_p reach every GPU engine under the names they take.
func TestSamplingControlsBody(t *testing.T) {
	for _, kind := range []fakeengine.Kind{fakeengine.VLLM, fakeengine.SGLang, fakeengine.TRTLLM} {
		t.Run(string(kind), func(t *testing.T) {
			f := (&fakeengine.Server{Kind: kind, TokenIDs: true}).Start(t)
			e := connect(t, f, openaihttp.TokenAuto)
			s, err := e.Generate(t.Context(), engine.Request{ID: "req-1", Prompt: []uint32{1, 2, 3}, MaxTokens: 4, StopTokens: []uint32{99, 7},
				Sampling: engine.Sampling{Temperature: 0.5, PresencePenalty: 0.5, FrequencyPenalty: -0.25, RepetitionPenalty: 1.25,
					LogitBias: map[uint32]float32{5: -100, 8: 2.5}, MinP: 0.125}})
			if err != nil {
				t.Fatal(err)
			}
			testutil.Drain(t, t.Context(), s)
			reqs := f.Completions()
			if len(reqs) != 1 {
				t.Fatalf("%d requests", len(reqs))
			}
			var body map[string]any
			if err := json.Unmarshal(reqs[0].Body, &body); err != nil {
				t.Fatal(err)
			}
			want := map[string]any{"presence_penalty": 0.5, "frequency_penalty": -0.25, "repetition_penalty": 1.25, "min_p": 0.125,
				"logit_bias": map[string]any{"5": -100.0, "8": 2.5}, "stop_token_ids": []any{99.0, 7.0}}
			for k, v := range want {
				if !reflect.DeepEqual(body[k], v) {
					t.Errorf("%s = %v, want %v in\n%s", k, body[k], v, reqs[0].Body)
				}
			}
		})
	}
}
