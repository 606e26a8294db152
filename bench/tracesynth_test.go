package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"
)

// smallVocab is a vocabulary as small as stories260K's ordinary tokens.
func smallVocab(n int) []uint32 {
	v := make([]uint32, n)
	for i := range v {
		v[i] = uint32(3 + 2*i)
	}
	return v
}

func TestSynthEqualIDsGiveEqualBlocksAndDifferentIDsDifferent(t *testing.T) {
	recs := readTestTrace(t)
	var maxID int64
	ids := map[int64]bool{}
	for _, r := range recs {
		for _, h := range r.HashIDs {
			ids[h], maxID = true, max(maxID, h)
		}
	}
	// Blocks as short as a 1/64 token scale makes them, from 40 tokens: the
	// shortest blocks and the smallest vocabulary where chance would collide.
	s, err := NewSynth(smallVocab(40), 8, 7, maxID)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int64{}
	for id := range ids {
		b := s.Block(id)
		if again := s.Block(id); !slices.Equal(b, again) {
			t.Fatalf("block %d differs between two calls", id)
		}
		for _, tok := range b {
			if !slices.Contains(s.Vocab, tok) {
				t.Fatalf("block %d holds token %d, not in the vocabulary", id, tok)
			}
		}
		key := string(uint32sBytes(b))
		if other, dup := seen[key]; dup {
			t.Fatalf("blocks %d and %d are identical", id, other)
		}
		seen[key] = id
	}
	// Another synthesizer with the same inputs, built from the vocabulary in
	// another order, makes the same blocks: a replay is reproducible.
	v := smallVocab(40)
	slices.Reverse(v)
	s2, err := NewSynth(v, 8, 7, maxID)
	if err != nil {
		t.Fatal(err)
	}
	for id := range ids {
		if !slices.Equal(s.Block(id), s2.Block(id)) {
			t.Fatalf("block %d depends on the vocabulary's order", id)
		}
	}
}

func uint32sBytes(v []uint32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = append(b, byte(x), byte(x>>8), byte(x>>16), byte(x>>24))
	}
	return b
}

// TestSynthPromptsShareExactlyTheirCommonBlocks checks the property a replay
// rests on, over the trace's own prompts: two prompts agree on their first k
// blocks exactly when their first k hash ids agree.
func TestSynthPromptsShareExactlyTheirCommonBlocks(t *testing.T) {
	w := TraceWindow{Speedup: 1, TokenScale: 1.0 / 32, BlockSize: 512}
	reqs, err := w.Apply(readTestTrace(t))
	if err != nil {
		t.Fatal(err)
	}
	b := w.ScaledBlockSize()
	s, err := NewSynth(smallVocab(100), b, 1, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	prompts := make([][]uint32, len(reqs))
	for i, r := range reqs {
		if prompts[i], err = s.Prompt(r.HashIDs, r.InputLength); err != nil {
			t.Fatal(err)
		}
		if len(prompts[i]) != r.InputLength {
			t.Fatalf("line %d: %d tokens, want %d", r.Line, len(prompts[i]), r.InputLength)
		}
	}
	shared := 0
	for i := range reqs {
		for j := i + 1; j < len(reqs); j++ {
			ids := commonPrefix(reqs[i].HashIDs, reqs[j].HashIDs)
			// Whole blocks in common: the tokens agree through them and differ
			// in the next full block (a partial block may end before they do).
			toks := commonPrefix(prompts[i], prompts[j])
			want := min(ids*b, len(prompts[i]), len(prompts[j]))
			if toks < want {
				t.Fatalf("lines %d and %d share %d blocks but only %d tokens", reqs[i].Line, reqs[j].Line, ids, toks)
			}
			if full := min(len(prompts[i]), len(prompts[j])) / b; ids < full && toks >= (ids+1)*b {
				t.Fatalf("lines %d and %d share %d blocks but %d tokens", reqs[i].Line, reqs[j].Line, ids, toks)
			}
			if ids > 0 {
				shared++
			}
		}
	}
	if shared == 0 {
		t.Fatal("no two prompts of the window share a block; the test checks nothing")
	}
}

func commonPrefix[T comparable](a, b []T) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func TestNewSynthRefusesBlocksTooShortToTellIDsApart(t *testing.T) {
	// 10 tokens spell 100 ids in 2 digits: 1000 ids need 3.
	if _, err := NewSynth(smallVocab(10), 2, 1, 999); err == nil {
		t.Error("blocks of 2 tokens over 10 tokens accepted for 1000 ids")
	}
	s, err := NewSynth(smallVocab(10), 3, 1, 999)
	if err != nil || s.Digits != 3 {
		t.Errorf("NewSynth = %+v, %v; want 3 digits", s, err)
	}
	if _, err := NewSynth([]uint32{5, 5, 5}, 16, 1, 1); err == nil {
		t.Error("a vocabulary of one token accepted")
	}
	if _, err := s.Prompt([]int64{1, 2}, 7); err == nil {
		t.Error("7 tokens accepted for 2 blocks of 3")
	}
}

func TestTraceReplayPreparesAgainstTheServer(t *testing.T) {
	var tokenized tokenizeBody
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			fmt.Fprint(w, `{"object": "list", "data": [{"id": "other", "max_model_len": 9}, {"id": "m", "max_model_len": 64}]}`)
		case "/tokenize":
			if err := json.NewDecoder(r.Body).Decode(&tokenized); err != nil {
				t.Error(err)
			}
			fmt.Fprint(w, `{"count": 12, "max_model_len": 64, "tokens": [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 15]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer ts.Close()
	reqs := []TraceRequest{
		{Line: 1, InputLength: 10, OutputLength: 5, HashIDs: []int64{4, 9, 1}},
		{Line: 2, At: 3 * time.Second, InputLength: 8, OutputLength: 2, HashIDs: []int64{4, 9}},
		{Line: 9, At: 3 * time.Second, InputLength: 10, OutputLength: 2, HashIDs: []int64{4, 8, 8}},
		{Line: 3, At: 4 * time.Second, InputLength: 70, OutputLength: 20, HashIDs: slices.Repeat([]int64{7}, 18)},
	}
	tr, err := NewTraceReplay("t", reqs, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	if _, err := tr.Next(rng); err == nil {
		t.Error("Next before Prepare succeeded")
	}
	c := &Client{URL: ts.URL, Endpoint: EndpointCompletions, Model: "m"}
	if err := tr.Prepare(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if tokenized.Model != "m" || tokenized.AddSpecialTokens || tokenized.Prompt == "" {
		t.Errorf("tokenize request = %+v", tokenized)
	}
	if len(tr.synth.Vocab) != 11 || tr.ctxLen != 64 || tr.Cut != 1 {
		t.Errorf("prepared %d tokens, context %d, %d cut; want 11, 64, 1", len(tr.synth.Vocab), tr.ctxLen, tr.Cut)
	}
	var got []Request
	for {
		r, err := tr.Next(rng)
		if errors.Is(err, ErrWorkloadDone) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if len(got) != 4 {
		t.Fatalf("%d requests, want 4", len(got))
	}
	for i, r := range got {
		// Line 9 shares one block of three with an earlier prompt: fresh.
		if want := []string{ClassFresh, ClassReuse, ClassFresh, ClassFresh}[i]; r.Class != want {
			t.Errorf("request %d is class %s, want %s", i, r.Class, want)
		}
		if !r.IgnoreEOS || r.At != reqs[i].At || len(r.PromptIDs) != r.PromptTokens {
			t.Errorf("request %d = %+v", i, r)
		}
	}
	if !slices.Equal(got[0].PromptIDs[:8], got[1].PromptIDs) || got[0].MaxTokens != 5 {
		t.Errorf("requests sharing two blocks: %v and %v", got[0].PromptIDs, got[1].PromptIDs)
	}
	// 70 + 20 tokens do not fit 64: the prompt loses its tail.
	if got[3].PromptTokens != 44 || got[3].MaxTokens != 20 {
		t.Errorf("cut request: %d prompt tokens, %d output; want 44, 20", got[3].PromptTokens, got[3].MaxTokens)
	}
}

type tokenizeBody struct {
	Model            string `json:"model"`
	Prompt           string `json:"prompt"`
	AddSpecialTokens bool   `json:"add_special_tokens"`
}

func TestFitContextCutsThePromptTail(t *testing.T) {
	for _, c := range []struct{ in, out, ctx, wantIn, wantOut int }{
		{100, 20, 0, 100, 20},
		{100, 20, 120, 100, 20},
		{100, 20, 64, 44, 20},
		{100, 200, 64, 1, 63},
	} {
		if in, out := fitContext(c.in, c.out, c.ctx); in != c.wantIn || out != c.wantOut {
			t.Errorf("fitContext(%d, %d, %d) = %d, %d; want %d, %d", c.in, c.out, c.ctx, in, out, c.wantIn, c.wantOut)
		}
	}
}
