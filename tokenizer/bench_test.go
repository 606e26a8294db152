package tokenizer

import (
	"strings"
	"testing"
)

// benchProse is English of the kind prompts are made of.
const benchProse = `Once upon a time, in a quiet village by the sea, there lived an old fisherman
named Tom. Every morning he'd wake before dawn, check his nets, and row out past the
lighthouse. "The sea gives what it gives," he'd say to anyone who asked. In 1987 a storm
took his boat; by 1990 he had built another, 23 feet long, with his own two hands.
Children followed him along the harbour wall, asking questions: Why is the water green?
How deep does it go? What's the biggest fish you've ever caught? He answered them all,
sometimes truthfully. `

// benchText repeats benchProse to n bytes.
func benchText(n int) string {
	s := strings.Repeat(benchProse, n/len(benchProse)+1)
	return s[:n]
}

// BenchmarkEncode encodes 10 KB of English with each tokenizer; tokens/s is the
// figure to read.
func BenchmarkEncode(b *testing.B) {
	text := benchText(10 << 10)
	cl, err := CL100K()
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		tok  Tokenizer
	}{
		{"cl100k", cl},
		{"gpt2-gguf", vocabFor(b, gpt2File)},
		{"phi3-gguf", vocabFor(b, phi3File)},
		// A pre-tokenizer that runs llama.cpp's pattern list through regexp2.
		{"deepseek-llm-gguf", vocabFor(b, "testdata/ggml-vocab-deepseek-llm.gguf")},
		{"stories260K", vocabFor(b, "stories260K")},
	} {
		b.Run(c.name, func(b *testing.B) {
			n := len(c.tok.Encode(text))
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				c.tok.Encode(text)
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
