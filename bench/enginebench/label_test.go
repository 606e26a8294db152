package enginebench

import (
	"strings"

	"testing"

	"github.com/tandem-serve/tandem/engine/quant"
	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/tokenizer"
)

// A Q6_K file of a model whose rows are too short for Q6_K blocks is mostly Q8_0
// (llama.cpp's fallback) yet is a Q6_K file, as llama-bench names it; a file that
// does not say is named by the type of most of its bytes.
func TestTypeLabelIsTheFileType(t *testing.T) {
	build := func(fileType int) *gguf.File {
		t.Helper()
		var w gguf.Writer
		w.Set("general.architecture", "llama")
		if fileType >= 0 {
			w.Set("general.file_type", uint32(fileType))
		}
		for _, c := range []struct {
			name string
			typ  gguf.Type
			rows int
		}{{"big.weight", gguf.TypeQ8_0, 16}, {"small.weight", gguf.TypeQ6_K, 1}} {
			b, err := quant.Quantize(c.typ, make([]float32, 256*c.rows))
			if err != nil {
				t.Fatal(err)
			}
			w.Tensor(c.name, c.typ, []uint64{256, uint64(c.rows)}, b)
		}
		w.F32("norm.weight", []uint64{256}, make([]float32, 256))
		b, err := w.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, c := range []struct {
		fileType int
		want     string
	}{{18, "Q6_K"}, {15, "Q4_K_M"}, {-1, "Q8_0"}, {99, "Q8_0"}} {
		if got := typeLabel(build(c.fileType)); got != c.want {
			t.Errorf("general.file_type %d: labelled %s, want %s", c.fileType, got, c.want)
		}
	}
}

// llama.cpp refuses a file whose special token ids are not uint32; the tokenizer
// still reads the same ids back.
func TestMakeModelTokenIDsAreUint32(t *testing.T) {
	s, _ := LookupShape("smoke")
	b, err := MakeModel(s, "q8_0", 1)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, key := range f.Keys() {
		if v, _ := f.Value(key); strings.HasSuffix(key, "_token_id") {
			n++
			if v.Type != gguf.ValueUint32 {
				t.Errorf("%s is %s, want uint32", key, v.Type)
			}
		}
	}
	if n == 0 {
		t.Fatal("no special token ids")
	}
	spec, err := tokenizer.SpecFromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	if spec.BOS != 1 || spec.EOS != 2 {
		t.Errorf("BOS %d, EOS %d, want stories260K's 1 and 2", spec.BOS, spec.EOS)
	}
}
