package native

import (
	"slices"
	"testing"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/internal/testutil/testmodel"
)

// The first tokens llama2.c's own test draws greedily from BOS with stories260K
// (internal/testutil/testmodel/stories260K-greedy.txt, with its source and licence).
func TestStories260KGreedyMatchesReference(t *testing.T) {
	stories260KReference, _ := testmodel.Stories260KGreedy()
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
