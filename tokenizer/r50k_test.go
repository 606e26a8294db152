package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	tiktoken "github.com/tiktoken-go/tokenizer"
)

// TestGPT2AgreesWithR50K holds the GPT-2 vocabulary read from GGUF to OpenAI's
// r50k_base as tiktoken-go ships it (the same 50,257 tokens, merged by tiktoken's own
// algorithm), on random text rich in whitespace runs, digits, contractions, emoji and
// CJK, and on decoding.
func TestGPT2AgreesWithR50K(t *testing.T) {
	v := vocabFor(t, gpt2File)
	codec, err := tiktoken.Get(tiktoken.R50kBase)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(50, 257))
	texts := []string{benchText(4 << 10), "Hello world", " this is 🦙.cpp", "  \t\n\n 12345 don't WON'T"}
	for range 2000 {
		texts = append(texts, randomText(r, 1+r.IntN(40)))
	}
	for _, s := range texts {
		// tiktoken-go runs r50k's pattern through regexp2, which skips U+007F (see
		// regexp2Skips) and so drops it from the text.
		s = strings.ReplaceAll(s, "\x7f", "")
		ids, _, err := codec.Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]uint32, len(ids))
		for i, id := range ids {
			want[i] = uint32(id)
		}
		got := v.Encode(s)
		if !slices.Equal(got, want) {
			t.Fatalf("Encode(%q)\n got %v\nr50k %v", s, got, want)
		}
		dec, err := codec.Decode(ids)
		if err != nil {
			t.Fatal(err)
		}
		if back := v.Decode(got); back != dec || back != s {
			t.Fatalf("Decode(%q) = %q, r50k %q", s, back, dec)
		}
	}
	if n := len(texts); n < 2000 {
		t.Fatalf("only %d texts", n)
	}
}
