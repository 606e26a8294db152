package gguf_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/gguf"
)

func TestOpenStories260K(t *testing.T) {
	f, err := gguf.Open(filepath.Join("..", "models", "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Version() != 3 || f.Alignment() != 32 {
		t.Errorf("version %d alignment %d, want 3 and 32", f.Version(), f.Alignment())
	}
	for key, want := range map[string]uint64{
		"llama.embedding_length": 64, "llama.feed_forward_length": 172, "llama.block_count": 5,
		"llama.attention.head_count": 8, "llama.attention.head_count_kv": 4, "llama.context_length": 2048,
		"tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
	} {
		if got, err := f.Uint(key); err != nil || got != want {
			t.Errorf("%s = %d, %v; want %d", key, got, err, want)
		}
	}
	if arch, _ := f.String("general.architecture"); arch != "llama" {
		t.Errorf("architecture %q", arch)
	}
	toks, err := f.Strings("tokenizer.ggml.tokens")
	if err != nil || len(toks) != 512 || toks[259] != "▁" && toks[3] != "<0x00>" {
		t.Errorf("tokens: %d, %v (toks[3] %q)", len(toks), err, toks[min(3, len(toks)-1)])
	}
	scores, err := f.Float32s("tokenizer.ggml.scores")
	if err != nil || len(scores) != 512 {
		t.Errorf("scores: %d, %v", len(scores), err)
	}
	if types, err := f.Int32s("tokenizer.ggml.token_type"); err != nil || len(types) != 512 {
		t.Errorf("token types: %d, %v", len(types), err)
	}
	if n := len(f.Tensors()); n != 48 {
		t.Errorf("%d tensors, want 48", n)
	}
	emb, ok := f.Tensor("token_embd.weight")
	if !ok || emb.Type != gguf.TypeF32 || len(emb.Dims) != 2 || emb.Dims[0] != 64 || emb.Dims[1] != 512 || len(emb.Data) != 64*512*4 {
		t.Errorf("token_embd.weight = %+v (%d bytes)", emb.Dims, len(emb.Data))
	}
	if _, err := f.String("no.such.key"); !errors.Is(err, gguf.ErrMissing) {
		t.Errorf("missing key: %v, want ErrMissing", err)
	}
	if _, err := f.String("llama.block_count"); err == nil || !strings.Contains(err.Error(), "llama.block_count") {
		t.Errorf("wrong type: %v, want an error naming the key", err)
	}
}

// sample writes a file with one value of every type and two tensors.
func sample(t testing.TB, align int) []byte {
	w := &gguf.Writer{Alignment: align}
	w.Set("general.architecture", "llama").
		Set("u8", uint8(7)).Set("i8", int8(-7)).Set("u16", uint16(700)).Set("i16", int16(-700)).
		Set("u32", uint32(70000)).Set("i32", int32(-70000)).Set("u64", uint64(1)<<40).Set("i64", int64(-1)<<40).
		Set("f32", float32(0.5)).Set("f64", 0.25).Set("yes", true).
		Set("names", []string{"a", "", "ç"}).Set("scores", []float32{1, -2.5}).Set("ids", []int32{3, -4}).
		Set("uids", []uint32{5, 6})
	w.F32("a.weight", []uint64{4, 2}, []float32{1, 2, 3, 4, 5, 6, 7, 8})
	w.Tensor("b.weight", gguf.TypeQ8_0, []uint64{32}, make([]byte, 34))
	b, err := w.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	for _, align := range []int{0, 64} {
		f, err := gguf.Parse(sample(t, align))
		if err != nil {
			t.Fatal(err)
		}
		if i, _ := f.Int("i64"); i != -1<<40 {
			t.Errorf("i64 = %d", i)
		}
		if u, _ := f.Uint("u32"); u != 70000 {
			t.Errorf("u32 = %d", u)
		}
		if _, err := f.Uint("i8"); err == nil {
			t.Error("a negative int8 read as unsigned")
		}
		if x, _ := f.Float("f32"); x != 0.5 {
			t.Errorf("f32 = %v", x)
		}
		if b, _ := f.Bool("yes"); !b {
			t.Error("yes = false")
		}
		if s, _ := f.Strings("names"); len(s) != 3 || s[2] != "ç" {
			t.Errorf("names = %q", s)
		}
		if ids, _ := f.Int32s("ids"); len(ids) != 2 || ids[1] != -4 {
			t.Errorf("ids = %v", ids)
		}
		if ids, _ := f.Int32s("uids"); len(ids) != 2 || ids[1] != 6 {
			t.Errorf("uids = %v", ids)
		}
		a, _ := f.Tensor("a.weight")
		if got := binary.LittleEndian.Uint32(a.Data[28:]); got != 0x41000000 || a.Elems() != 8 {
			t.Errorf("a.weight last value bits %#x, elems %d", got, a.Elems())
		}
		want := max(align, 32)
		if f.Alignment() != want {
			t.Errorf("alignment %d, want %d", f.Alignment(), want)
		}
		b, _ := f.Tensor("b.weight")
		if b.Type != gguf.TypeQ8_0 || len(b.Data) != 34 {
			t.Errorf("b.weight %s %d bytes", b.Type, len(b.Data))
		}
	}
}

func TestOpenMapsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(path, sample(t, 0), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := f.Tensor("a.weight"); len(a.Data) != 32 {
		t.Errorf("a.weight %d bytes", len(a.Data))
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := gguf.Open(filepath.Join(t.TempDir(), "absent.gguf")); err == nil {
		t.Error("opened a file that does not exist")
	}
}

func TestBadFiles(t *testing.T) {
	good := sample(t, 0)
	trunc := good[:len(good)-40]
	unknownType := func() []byte {
		w := &gguf.Writer{}
		w.Tensor("x", gguf.Type(99), []uint64{4}, make([]byte, 16))
		b, _ := w.Bytes()
		return b
	}()
	notWhole := func() []byte {
		w := &gguf.Writer{}
		w.Tensor("q", gguf.TypeQ4_K, []uint64{100}, make([]byte, 144))
		b, _ := w.Bytes()
		return b
	}()
	hugeCount := bytes.Clone(good[:24])
	binary.LittleEndian.PutUint64(hugeCount[16:], 1<<60)
	v1 := bytes.Clone(good)
	binary.LittleEndian.PutUint32(v1[4:], 1)
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"empty":        {nil, "not a GGUF file"},
		"wrong magic":  {append([]byte("GGML"), good[4:]...), "not a GGUF file"},
		"version 1":    {v1, "version 1"},
		"truncated":    {trunc, "past the end"},
		"unknown type": {unknownType, "unknown type 99"},
		"not whole":    {notWhole, "Q4_K"},
		"huge count":   {hugeCount, "more than"},
	} {
		_, err := gguf.Parse(tc.data)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(sample(f, 0))
	f.Add(sample(f, 64))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := gguf.Parse(data)
		if err != nil {
			return
		}
		for _, ti := range file.Tensors() {
			if rb, err := ti.Type.RowBytes(int(ti.Dims[0])); err != nil || len(ti.Data) == 0 && rb > 0 {
				t.Fatalf("tensor %q accepted with %d bytes", ti.Name, len(ti.Data))
			}
		}
		for _, k := range file.Keys() {
			v, _ := file.Value(k)
			_ = v.String()
			_, _ = file.Strings(k)
			_, _ = file.Float32s(k)
			_, _ = file.Int32s(k)
		}
	})
}

func TestMetadataOnly(t *testing.T) {
	f, err := gguf.Parse(sample(t, 64))
	if err != nil {
		t.Fatal(err)
	}
	b := f.MetadataOnly(func(k string) bool { return k != "u8" })
	g, err := gguf.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Tensors()) != 0 || len(g.Keys()) != len(f.Keys())-2 {
		t.Fatalf("%d tensors, keys %v", len(g.Tensors()), g.Keys())
	}
	for _, k := range g.Keys() {
		a, _ := f.Value(k)
		c, _ := g.Value(k)
		if a.String() != c.String() {
			t.Errorf("%s: %s, want %s", k, c, a)
		}
	}
	if s, _ := g.Strings("names"); len(s) != 3 || s[2] != "ç" {
		t.Errorf("names = %q", s)
	}
	if ids, _ := g.Int32s("ids"); len(ids) != 2 || ids[1] != -4 {
		t.Errorf("ids = %v", ids)
	}
	if i, _ := g.Int("i64"); i != -1<<40 {
		t.Errorf("i64 = %d", i)
	}
	if y, _ := g.Bool("yes"); !y {
		t.Error("yes lost")
	}
}
