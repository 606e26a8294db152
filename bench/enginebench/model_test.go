package enginebench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/engine/native"
	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/tokenizer"
)

// The Q4_K_M mix is llama.cpp's for SmolLM2-135M: rows of 576 fall back from Q4_K to
// Q5_0 and from Q6_K to Q8_0; ffn_down (rows of 1536) keeps Q4_K, with Q6_K in the
// layers use_more_bits picks (0-2, 5, 8, ..., 23, 26-29 of 30).
func TestQ4KMMixIsLlamaCpps(t *testing.T) {
	s, err := LookupShape("smollm2-135m")
	if err != nil {
		t.Fatal(err)
	}
	moreBits := map[int]bool{}
	for _, l := range []int{0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29} {
		moreBits[l] = true
	}
	for l := range s.Layers {
		for name, want := range map[string][2]gguf.Type{
			"attn_q.weight":      {gguf.TypeQ5_0, gguf.TypeQ5_0},
			"attn_v.weight":      {gguf.TypeQ5_0, gguf.TypeQ8_0},
			"ffn_up.weight":      {gguf.TypeQ5_0, gguf.TypeQ5_0},
			"attn_output.weight": {gguf.TypeQ5_0, gguf.TypeQ5_0},
			"ffn_down.weight":    {gguf.TypeQ4_K, gguf.TypeQ6_K},
		} {
			k := s.D
			if name == "ffn_down.weight" {
				k = s.FFN
			}
			w := want[0]
			if moreBits[l] {
				w = want[1]
			}
			got, err := tensorType("q4_k_m", fmt.Sprintf("blk.%d.%s", l, name), l, s.Layers, k)
			if err != nil || got != w {
				t.Errorf("layer %d %s: %v %v, want %v", l, name, got, err, w)
			}
		}
	}
	if got, _ := tensorType("q4_k_m", "output.weight", -1, s.Layers, s.D); got != gguf.TypeQ8_0 {
		t.Errorf("output: %v, want Q8_0 (Q6_K's fallback)", got)
	}
	if _, err := tensorType("q3_k_s", "output.weight", -1, s.Layers, s.D); err == nil || !strings.Contains(err.Error(), "q3_k_s") {
		t.Errorf("unknown type: %v", err)
	}
}

// Every file type makes a file the engine loads, of the shape asked for, with a
// tokenizer covering its vocabulary; the same seed makes the same bytes.
func TestMakeModelLoads(t *testing.T) {
	s, _ := LookupShape("smoke")
	for _, ft := range FileTypes {
		t.Run(ft, func(t *testing.T) {
			b, err := MakeModel(s, ft, 5)
			if err != nil {
				t.Fatal(err)
			}
			again, _ := MakeModel(s, ft, 5)
			if !bytes.Equal(b, again) {
				t.Error("the same seed made different files")
			}
			other, _ := MakeModel(s, ft, 6)
			if bytes.Equal(b, other) {
				t.Error("another seed made the same file")
			}
			f, err := gguf.Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			tok, err := tokenizer.FromGGUF(f)
			if err != nil {
				t.Fatal(err)
			}
			if tok.VocabSize() != s.Vocab {
				t.Errorf("tokenizer of %d tokens, want %d", tok.VocabSize(), s.Vocab)
			}
			e, err := native.New(native.Config{File: f, NumBlocks: 8})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			info := e.Info()
			if info.VocabSize != s.Vocab || info.Layout.Layers != s.Layers || info.Layout.KVHeads != s.KVHeads {
				t.Errorf("loaded %+v, want the smoke shape", info)
			}
		})
	}
	if _, err := MakeModel(s, "q2_k", 1); err == nil {
		t.Error("an unknown file type made a file")
	}
}

// A shape of another architecture writes that architecture's keys and tensors: a
// small OLMo 2 (the olmo2-1b shape's family) loads as OLMo 2, not as llama.
func TestMakeModelOfAnotherArchitecture(t *testing.T) {
	s, _ := LookupShape("olmo2-1b")
	s.D, s.Layers, s.Heads, s.KVHeads, s.FFN, s.Vocab = 256, 2, 4, 4, 512, 1000
	b, err := MakeModel(s, "q8_0", 1)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := f.String("general.architecture"); got != "olmo2" {
		t.Errorf("architecture %q, want olmo2", got)
	}
	if _, ok := f.Tensor("blk.0.attn_norm.weight"); ok {
		t.Error("an OLMo 2 file with llama's pre-attention norm")
	}
	e, err := native.New(native.Config{File: f, NumBlocks: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if info := e.Info(); info.VocabSize != s.Vocab || info.Layout.Layers != s.Layers {
		t.Errorf("loaded %+v, want the small OLMo 2", info)
	}
}

// Run prints one row per test and thread count, with positive rates.
func TestRunPrintsTheTable(t *testing.T) {
	s, _ := LookupShape("smoke")
	path := filepath.Join(t.TempDir(), "smoke.gguf")
	if err := WriteModel(path, s, "q4_k_m", 1); err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.Model, o.Threads, o.Prompt, o.Gen, o.Batch, o.Reps = path, []int{1, 2}, 40, 6, 3, 2
	var out strings.Builder
	res, err := Run(context.Background(), o, &out)
	if err != nil {
		t.Fatal(err)
	}
	var tests []string
	for _, r := range res {
		tests = append(tests, fmt.Sprintf("%d/%s", r.Threads, r.Test))
		if !(r.Mean > 0) {
			t.Errorf("%+v: no rate", r)
		}
	}
	if got, want := strings.Join(tests, " "), "1/pp40 1/tg6 1/tg6 x3 2/pp40 2/tg6 2/tg6 x3"; got != want {
		t.Errorf("tests %q, want %q", got, want)
	}
	if !strings.Contains(out.String(), "smoke-random-q4_k_m Q4_K_M") || strings.Count(out.String(), "\n|") != 2+len(res) {
		t.Errorf("table:\n%s", out.String())
	}
	o.Prompt = 2000
	if _, err := Run(context.Background(), o, &out); err == nil || !strings.Contains(err.Error(), "context") {
		t.Errorf("a prompt beyond the context: %v", err)
	}
	o.Model = filepath.Join(t.TempDir(), "missing.gguf")
	if _, err := Run(context.Background(), o, &out); err == nil {
		t.Error("a missing file ran")
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}
