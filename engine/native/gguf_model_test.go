package native

import (
	"slices"
	"testing"

	"github.com/tandem-serve/tandem/engine"
)

// The first tokens llama2.c's own test draws greedily from BOS with stories260K
// (../shared/models/README.md): "Once upon a time, there was a little girl named
// Lily. She loved to play outside in the park."
var stories260KReference = []uint32{403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337}

func TestStories260KGreedyMatchesReference(t *testing.T) {
	e := newTestEngine(t, Config{Model: "stories260K"})
	info := e.Info()
	if info.VocabSize != 512 || info.Model != "stories260K" && info.Model == "" {
		t.Fatalf("info %+v", info)
	}
	got, st := generate(t, e, engine.Request{ID: "r", Prompt: []uint32{1}, MaxTokens: len(stories260KReference)})
	if !slices.Equal(got, stories260KReference) {
		t.Fatalf("greedy from BOS:\n got %v\nwant %v", got, stories260KReference)
	}
	if st.Finish() != engine.FinishLength {
		t.Errorf("finish %v", st.Finish())
	}
}
