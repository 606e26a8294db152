package constrain_test

import (
	"os"
	"testing"

	"github.com/tandem-serve/tandem/constrain"
	"github.com/tandem-serve/tandem/tokenizer"
)

// cl100kVocab is cl100k_base's first n ids, a real BPE vocabulary.
func cl100kVocab(tb testing.TB, n int) *constrain.Vocabulary {
	tok, err := tokenizer.CL100K()
	if err != nil {
		tb.Fatal(err)
	}
	toks := make([][]byte, n)
	for id := range n {
		if !tok.IsSpecial(uint32(id)) {
			toks[id], _ = tok.TokenBytes(uint32(id))
		}
	}
	return constrain.NewVocabulary(toks)
}

// BenchmarkFreshMasks measures a walk through a record, every state new: the
// masks and transitions a schema's first request computes.
func BenchmarkFreshMasks(b *testing.B) {
	schema, err := os.ReadFile("../bench/testdata/records-schema.json")
	if err != nil {
		b.Fatal(err)
	}
	v := cl100kVocab(b, 49152)
	g, err := constrain.Compile(constrain.Spec{JSONSchema: string(schema)})
	if err != nil {
		b.Fatal(err)
	}
	text := []byte(`[{"name":"abcdefghijklmnop","age":12345,"pets":["cat","dog"],"ok":true},{"name":"x","age":1,"ok":false}`)
	b.ReportAllocs()
	for b.Loop() {
		m := constrain.NewAutomaton(g, v).NewMatcher()
		for i := range text {
			m.Mask()
			m.AdvanceBytes(text[i : i+1])
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(len(text)), "µs/mask")
}
