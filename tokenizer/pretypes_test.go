package tokenizer

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/gguf"
)

// The golden files under testdata/pre hold llama.cpp's tokenization of
// testdata/pre/inputs.inp with GPT-2's vocabulary under each tokenizer.ggml.pre name
// llama.cpp knows: the vocabulary is the same, so what differs is the pre-tokenizer
// and the rules tied to its name. testdata/pre/README says how they were made.

// goldenPres are the names with a golden file: every name llama.cpp's list had at
// the commit the files name.
var goldenPres = []string{
	"default", "llama-bpe", "llama3", "llama-v3", "falcon3", "deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon",
	"mpt", "starcoder", "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en", "jina-v2-es", "jina-v2-de",
	"jina-v2-code", "roberta-bpe", "refact", "command-r", "qwen2", "deepseek-r1-qwen", "stablelm2", "olmo", "dbrx",
	"smaug-bpe", "poro-chat", "chatglm-bpe", "viking", "jais", "tekken", "smollm", "codeshell", "bloom", "gpt3-finnish",
	"exaone", "chameleon", "minerva-7b", "megrez",
}

const preGoldenDir = "testdata/pre"

// withPre is a GGUF vocabulary-only file's metadata with tokenizer.ggml.pre set to
// pre, and the tokens in extra added as user-defined tokens, written by tandem's GGUF
// encoder: the file llama.cpp tokenized for the goldens.
func withPre(t testing.TB, path, pre string, extra ...string) []byte {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tokens, err := f.Strings(keyTokens)
	if err != nil {
		t.Fatal(err)
	}
	types, err := f.Int32s(keyTypes)
	if err != nil {
		t.Fatal(err)
	}
	tokens = append(tokens, extra...)
	for range extra {
		types = append(types, TokenUserDefined)
	}
	replaced := func(k string) bool { return k == keyPre || k == keyTokens || k == keyTypes }
	b := f.MetadataOnly(func(k string) bool { return !replaced(k) })
	// Append the keys: the header's key count is at offset 16 and nothing follows the
	// metadata of a file without tensors.
	binary.LittleEndian.PutUint64(b[16:], binary.LittleEndian.Uint64(b[16:])+3)
	var kv bytes.Buffer
	le := func(v any) { _ = binary.Write(&kv, binary.LittleEndian, v) }
	str := func(s string) { le(uint64(len(s))); kv.WriteString(s) }
	str(keyPre)
	le(uint32(gguf.ValueString))
	str(pre)
	str(keyTokens)
	le(uint32(gguf.ValueArray))
	le(uint32(gguf.ValueString))
	le(uint64(len(tokens)))
	for _, tok := range tokens {
		str(tok)
	}
	str(keyTypes)
	le(uint32(gguf.ValueArray))
	le(uint32(gguf.ValueInt32))
	le(uint64(len(types)))
	le(types)
	return append(b, kv.Bytes()...)
}

// preExtra are the tokens a pre-tokenizer's rules need: llama.cpp will not load a
// jina-v2 vocabulary without <mask>.
func preExtra(pre string) []string {
	if strings.HasPrefix(pre, "jina-v2-") {
		return []string{"<mask>"}
	}
	return nil
}

// TestWritePreVocabs writes the files the goldens were made from, when
// TANDEM_PRE_VOCAB_DIR names a directory (see testdata/pre/README).
func TestWritePreVocabs(t *testing.T) {
	dir := os.Getenv("TANDEM_PRE_VOCAB_DIR")
	if dir == "" {
		t.Skip("TANDEM_PRE_VOCAB_DIR is not set")
	}
	for _, pre := range goldenPres {
		if err := os.WriteFile(filepath.Join(dir, "ggml-vocab-gpt-2-"+pre+".gguf"), withPre(t, gpt2File, pre, preExtra(pre)...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPreTokenizerGoldens(t *testing.T) {
	inputs := readInputs(t, filepath.Join(preGoldenDir, "inputs.inp"))
	for _, pre := range goldenPres {
		t.Run(pre, func(t *testing.T) {
			f, err := gguf.Parse(withPre(t, gpt2File, pre, preExtra(pre)...))
			if err != nil {
				t.Fatal(err)
			}
			tok, err := FromGGUF(f)
			if err != nil {
				t.Fatal(err)
			}
			want := readIDs(t, filepath.Join(preGoldenDir, pre+".out"), len(inputs))
			for i, text := range inputs {
				if got := tok.Encode(text); !slices.Equal(got, want[i]) {
					t.Errorf("Encode(%q)\n got %v\nwant %v", text, got, want[i])
				}
			}
		})
	}
}

// TestPreTokenizerRules checks what llama.cpp ties to a pre-tokenizer's name besides
// the splitting: BOS added by default, and whole-word tokens taken before merging.
func TestPreTokenizerRules(t *testing.T) {
	for _, c := range []struct {
		pre          string
		addBOS       bool
		ignoreMerges bool
	}{
		{"llama-bpe", true, true}, {"tekken", true, true}, {"chameleon", true, false},
		{"dbrx", false, false}, {"chatglm-bpe", false, false}, {"deepseek-v3", false, false}, {"gpt-2", false, false},
	} {
		f, err := gguf.Parse(withPre(t, gpt2File, c.pre))
		if err != nil {
			t.Fatal(err)
		}
		fs, err := SpecFromGGUF(f)
		if err != nil {
			t.Fatal(err)
		}
		v, err := newVocab(fs)
		if err != nil {
			t.Fatal(err)
		}
		if fs.AddBOS != c.addBOS || v.ignoreMerges != c.ignoreMerges {
			t.Errorf("%s: AddBOS %v, ignoreMerges %v; want %v, %v", c.pre, fs.AddBOS, v.ignoreMerges, c.addBOS, c.ignoreMerges)
		}
	}
}

// TestJinaNeedsMask: llama.cpp will not load a jina-v2 vocabulary without the <mask>
// token its rule names, and tandem says why.
func TestJinaNeedsMask(t *testing.T) {
	f, err := gguf.Parse(withPre(t, gpt2File, "jina-v2-code"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := SpecFromGGUF(f); err == nil || !strings.Contains(err.Error(), "needs a <mask> token") {
		t.Fatalf("SpecFromGGUF: %v, want an error about <mask>", err)
	}
}

// readInputs reads inputs separated as llama.cpp's .inp files separate them.
func readInputs(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const sep = "\n__ggml_vocab_test__\n"
	return strings.Split(strings.TrimSuffix(string(b), sep), sep)
}

// readIDs reads one line of ids per input, as llama-tokenize --ids prints them
// ("[1, 2, 3]").
func readIDs(t *testing.T, path string, n int) [][]uint32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("%s: %d lines for %d inputs", path, len(lines), n)
	}
	out := make([][]uint32, n)
	for i, line := range lines {
		line = strings.Trim(line, "[]")
		for _, f := range strings.FieldsFunc(line, func(r rune) bool { return r == ',' || r == ' ' }) {
			id, err := strconv.ParseUint(f, 10, 32)
			if err != nil {
				t.Fatalf("%s line %d: %v", path, i+1, err)
			}
			out[i] = append(out[i], uint32(id))
		}
	}
	return out
}
