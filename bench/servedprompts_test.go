package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// spmServer plays a server whose model has a SentencePiece-like tokenizer: a
// few whole words are pieces, every other word is split into letters, a dummy
// prefix piece "▁" starts the text, and a generation adds BOS.
type spmServer struct{ words map[string]bool }

func (s spmServer) tokenize(text string, special bool) (ids []uint32, strs []string) {
	add := func(p string) {
		ids, strs = append(ids, uint32(len(p))), append(strs, p)
	}
	if special {
		add("<s>")
	}
	add("▁")
	for _, w := range strings.SplitAfter(text, " ")[1:] {
		w = strings.TrimSuffix(w, " ")
		if s.words[" "+w] {
			add("▁" + w)
			continue
		}
		add("▁")
		for _, c := range w {
			add(string(c))
		}
	}
	return ids, strs
}

func (s spmServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/models":
		fmt.Fprint(w, `{"data": [{"id": "spm", "max_model_len": 300}]}`)
	case "/tokenize":
		var req struct {
			Prompt           string `json:"prompt"`
			AddSpecialTokens bool   `json:"add_special_tokens"`
			ReturnTokenStrs  bool   `json:"return_token_strs"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		ids, strs := s.tokenize(req.Prompt, req.AddSpecialTokens)
		if !req.ReturnTokenStrs {
			strs = nil
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"tokens": ids, "token_strs": strs})
	default:
		http.NotFound(w, r)
	}
}

func TestServedPromptsAreSizedInTheServedModelsTokens(t *testing.T) {
	base := testPrompts(t)
	srv := spmServer{words: map[string]bool{}}
	for _, w := range base.words[:40] {
		srv.words[w] = true
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	c := &Client{URL: ts.URL, Endpoint: EndpointCompletions}
	p, ctxLen, err := ServedPrompts(context.Background(), c, base)
	if err != nil {
		t.Fatal(err)
	}
	if ctxLen != 300 || len(p.words) != 40 || p.overhead != 2 {
		t.Fatalf("context %d, %d words, overhead %d; want 300, 40, 2 (BOS and the dummy prefix)", ctxLen, len(p.words), p.overhead)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{3, 17, 256} {
		s, err := p.Make(rng, n)
		if err != nil {
			t.Fatal(err)
		}
		if ids, _ := srv.tokenize(s, true); len(ids) != n {
			t.Errorf("a %d-token prompt is %d tokens of the served model", n, len(ids))
		}
	}
	if _, err := p.Make(rng, 2); err == nil || !strings.Contains(err.Error(), "model spm adds 2 tokens to every prompt") {
		t.Errorf("a prompt shorter than the overhead: %v", err)
	}

	// Too few one-token words: the caller falls back, with the reason.
	few := spmServer{words: map[string]bool{base.words[0]: true}}
	ts2 := httptest.NewServer(few)
	defer ts2.Close()
	if _, _, err := ServedPrompts(context.Background(), &Client{URL: ts2.URL, Endpoint: EndpointCompletions}, base); err == nil ||
		!strings.Contains(err.Error(), "holds only 1 of") {
		t.Errorf("one usable word: %v", err)
	}
}

func TestOneTokenWordsAlignsPieces(t *testing.T) {
	words := []string{" the", " cat", " sat"}
	for _, c := range []struct {
		pieces []string
		want   string
	}{
		{[]string{"Ġthe", "Ġcat", "Ġsat"}, " the cat sat"},      // byte-level BPE
		{[]string{"▁", "▁the", "▁c", "at", "▁sat"}, " the sat"}, // SentencePiece, dummy prefix
		{[]string{" th", "e", " cat", " s", "at"}, " cat"},      // split words
		{[]string{"▁the", "▁cat▁sat"}, " the"},                  // a piece across words is neither
		{[]string{"▁the", "▁dog", "▁sat"}, "error"},             // not the text
		{[]string{"x", "▁the", "▁cat", "▁sat"}, "error"},        // a leading non-space
	} {
		got, err := oneTokenWords(words, c.pieces)
		s := strings.Join(got, "")
		if err != nil {
			s = "error"
		}
		if s != c.want {
			t.Errorf("pieces %q: one-token words %q (%v), want %q", c.pieces, got, err, c.want)
		}
	}
}
