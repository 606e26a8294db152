package tokenizer

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/models"
)

// The vocabularies under testdata are llama.cpp's vocab-only GGUF files, with the
// reference tokenizations llama.cpp's tests hold its tokenizers to (see NOTICE).
const (
	gpt2File = "testdata/ggml-vocab-gpt-2.gguf"
	phi3File = "testdata/ggml-vocab-phi-3.gguf"
)

// preVocabFiles are llama.cpp's vocabularies of other pre-tokenizers: DeepSeek Coder's
// and LLM's, Falcon's, MPT's (gpt-2's pattern), StarCoder's and Refact's (digits alone).
var preVocabFiles = []string{
	"testdata/ggml-vocab-deepseek-coder.gguf",
	"testdata/ggml-vocab-deepseek-llm.gguf",
	"testdata/ggml-vocab-falcon.gguf",
	"testdata/ggml-vocab-mpt.gguf",
	"testdata/ggml-vocab-starcoder.gguf",
	"testdata/ggml-vocab-refact.gguf",
}

var specCache sync.Map // path -> Spec

// ggufSpec reads a testdata vocabulary once per test binary.
func ggufSpec(t testing.TB, path string) Spec {
	t.Helper()
	if s, ok := specCache.Load(path); ok {
		return s.(Spec)
	}
	var f *gguf.File
	var err error
	if path == "stories260K" {
		f, err = gguf.Parse(models.Stories260K)
	} else {
		f, err = gguf.Open(path)
	}
	if err != nil {
		t.Fatal(err)
	}
	s, err := SpecFromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	// The Spec's slices are copies; the mapping is not needed after reading.
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	specCache.Store(path, s)
	return s
}

func vocabFor(t testing.TB, path string) *Vocab {
	t.Helper()
	v, err := newVocab(ggufSpec(t, path))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

type refCase struct {
	text string
	want []uint32
}

// readReference reads a .inp/.out pair as llama.cpp's test-tokenizer-0 does: the
// inputs are separated by "\n__ggml_vocab_test__\n", the outputs are one line of ids
// per input.
func readReference(t *testing.T, vocabPath string) []refCase {
	t.Helper()
	inp, err := os.ReadFile(vocabPath + ".inp")
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(vocabPath + ".out")
	if err != nil {
		t.Fatal(err)
	}
	const sep = "\n__ggml_vocab_test__\n"
	texts := strings.Split(strings.TrimSuffix(string(inp), sep), sep)
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(texts) != len(lines) || len(texts) < 40 {
		t.Fatalf("%d inputs, %d outputs", len(texts), len(lines))
	}
	cases := make([]refCase, len(texts))
	for i, line := range lines {
		cases[i].text = texts[i]
		for _, f := range strings.Fields(line) {
			id, err := strconv.ParseUint(f, 10, 32)
			if err != nil {
				t.Fatalf("%s.out line %d: %v", vocabPath, i+1, err)
			}
			cases[i].want = append(cases[i].want, uint32(id))
		}
	}
	return cases
}

// TestReferenceTokenizations holds both algorithms to llama.cpp's published reference
// tokenizations (no BOS/EOS, special text not parsed), exactly.
func TestReferenceTokenizations(t *testing.T) {
	for _, path := range append([]string{gpt2File, phi3File}, preVocabFiles...) {
		t.Run(path, func(t *testing.T) {
			v := vocabFor(t, path)
			for _, c := range readReference(t, path) {
				if got := v.Encode(c.text); !slices.Equal(got, c.want) {
					t.Errorf("Encode(%q)\n got %v\nwant %v", c.text, got, c.want)
				}
			}
		})
	}
}
