package tokenizer

import (
	"slices"
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/internal/testutil/testmodel"
)

// storiesReference is the start of llama2.c's greedy generation from BOS with
// stories260K, and the text it begins (internal/testutil/testmodel/stories260K-greedy.txt,
// with its source and licence).
var storiesReference, storiesText = testmodel.Stories260KGreedy()

func TestStories260K(t *testing.T) {
	v := vocabFor(t, "stories260K")
	if v.VocabSize() != 512 || v.Name() != "llama-spm" {
		t.Fatalf("VocabSize %d, Name %q", v.VocabSize(), v.Name())
	}
	if bos, ok := v.BOS(); !ok || bos != 1 || !v.AddBOS() || v.EOS() != 2 {
		t.Fatalf("BOS %d %v, AddBOS %v, EOS %d; want 1, true, true, 2", bos, ok, v.AddBOS(), v.EOS())
	}
	if got := v.StopTokens(); !slices.Equal(got, []uint32{2}) {
		t.Errorf("StopTokens = %v, want [2]", got)
	}
	// "Once upon a time," is the reference's first five tokens.
	if got := v.Encode("Once upon a time,"); !slices.Equal(got, storiesReference[:5]) {
		t.Errorf("Encode(Once upon a time,) = %v, want %v", got, storiesReference[:5])
	}
	// The prompt the engine sees: BOS, then the text.
	prompt := append([]uint32{1}, v.Encode("Once upon a time")...)
	if !slices.Equal(prompt, []uint32{1, 403, 407, 261, 378}) {
		t.Errorf("prompt = %v", prompt)
	}
	text := v.Decode(storiesReference)
	if want := storiesText; !strings.HasPrefix(text, want) {
		t.Errorf("Decode(reference) = %q, want it to start %q", text, want)
	}
	// A generation right after a BOS-only prompt starts a text: streamed, it loses the
	// leading space as Decode does; continuing a prompt's text, it keeps it.
	d := NewDetokenizer(v).StartOfText()
	var sb strings.Builder
	for _, id := range storiesReference {
		sb.WriteString(d.Add(id))
	}
	sb.WriteString(d.Flush())
	if sb.String() != text {
		t.Errorf("streamed from the start = %q, Decode = %q", sb.String(), text)
	}
	cont := NewDetokenizer(v)
	if got := cont.Add(storiesReference[:2]...) + cont.Flush(); got != " Once upon" {
		t.Errorf("continuation = %q, want %q", got, " Once upon")
	}
	if got := v.Piece(403); got != "▁Once" {
		t.Errorf("Piece(403) = %q", got)
	}
}

// TestConcurrentEncode: the merge loops share pooled scratch space; tokenizers used
// from many goroutines give what they give alone (run with -race).
func TestConcurrentEncode(t *testing.T) {
	toks := []*Vocab{vocabFor(t, "stories260K"), vocabFor(t, gpt2File)}
	texts := []string{benchText(3000), "Once upon a time", " 12345 don't 🤖 日本語", strings.Repeat("ab", 300)}
	want := make([][][]uint32, len(toks))
	for i, v := range toks {
		for _, s := range texts {
			want[i] = append(want[i], v.Encode(s))
		}
	}
	errs := make(chan string, 64)
	done := make(chan struct{})
	for g := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for k := range 20 {
				i, j := (g+k)%len(toks), (g*3+k)%len(texts)
				if got := toks[i].Encode(texts[j]); !slices.Equal(got, want[i][j]) {
					errs <- toks[i].Name() + " " + texts[j][:min(20, len(texts[j]))]
					return
				}
			}
		}()
	}
	for range 8 {
		<-done
	}
	close(errs)
	for e := range errs {
		t.Errorf("concurrent Encode differs: %s", e)
	}
}
