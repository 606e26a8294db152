package openaihttp_test

import (
	"errors"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/openaihttp"
	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/internal/testutil/fakeengine"
	"github.com/tandem-serve/tandem/tokenizer"
)

// engineChunks are an engine's streamed text, one token a chunk as vLLM sends it:
// word-start spaces, a word split mid-way, characters whose byte tokens come as
// empty chunks before the one that completes them, a character and its combining
// accent in two chunks, JSON-escaped text, and a literal "▁", which is text like
// any other here.
var engineChunks = []string{
	" The", " temperature", "  here", " is", " twent", "y", "-", "five", " ", "", "°", "C", ".", "\n",
	"日", "本", " ", "", "", "", "🙂", " cafe", "\u0301", " <b>&", "▁", "x",
}

func ggufTokenizer(t *testing.T, path string) tokenizer.Tokenizer {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// texter is engine.TextStream's own method.
type texter interface{ Text() (string, bool) }

// drainText reads s to the end: its ids and each token's text, the stream's own
// when it has it, else what the frontend would decode from the ids.
func drainText(t *testing.T, tok tokenizer.Tokenizer, s engine.Stream) ([]uint32, []string, []*engine.TokenLogprobs) {
	t.Helper()
	defer s.Close()
	detok := tokenizer.NewDetokenizer(tok)
	var ids []uint32
	var texts []string
	var lps []*engine.TokenLogprobs
	for {
		id, err := s.Next(t.Context())
		if errors.Is(err, io.EOF) {
			if x := detok.Flush(); x != "" {
				texts = append(texts, x)
			}
			return ids, texts, lps
		}
		if err != nil {
			t.Fatal(err)
		}
		ids, lps = append(ids, id), append(lps, s.Logprobs())
		if tx, ok := s.(texter); ok {
			text, has := tx.Text()
			if !has {
				t.Fatal("a text-mode stream says it has no text of the engine's")
			}
			texts = append(texts, text)
		} else {
			texts = append(texts, detok.Add(id))
		}
	}
}

// An engine that streams only text reaches tandem with exactly that text, token
// by token, whatever the vocabulary: SentencePiece's puts a word-start "▁" that
// tokenizing the text again would double, byte-level BPE's does not. Usage is
// the engine's own count, which includes the stop token it left out of the text.
func TestTextModeKeepsTheEnginesText(t *testing.T) {
	for _, c := range []struct{ name, path, piece string }{
		{"llama-spm", filepath.Join("..", "..", "models", "stories260K.gguf"), "▁The"},
		{"gpt2-bpe", filepath.Join("..", "..", "tokenizer", "testdata", "ggml-vocab-gpt-2.gguf"), "ĠThe"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tok := ggufTokenizer(t, c.path)
			stop := tok.EOS()
			// The fake's ids only index the chunks; what tandem sees is their text.
			out := make([]uint32, 0, len(engineChunks)+1)
			for i := range engineChunks {
				out = append(out, uint32(i+len(engineChunks)))
			}
			f := (&fakeengine.Server{Kind: fakeengine.VLLM, LogprobIDs: true, Output: append(out, stop), Text: func(id uint32) string {
				if i := int(id) - len(engineChunks); i >= 0 && i < len(engineChunks) {
					return engineChunks[i]
				}
				return ""
			}}).Start(t)
			e, err := openaihttp.New(t.Context(), openaihttp.Config{URL: f.URL(), Dialect: dialect(fakeengine.VLLM), Tokenizer: tok,
				BlockSize: 16, TokenMode: openaihttp.TextTokens, ContextLength: 4096})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			prompt := tok.Encode("Hello")
			s, err := e.Generate(t.Context(), engine.Request{ID: "r", Prompt: prompt, MaxTokens: 100, StopTokens: tok.StopTokens(),
				Logprobs: true})
			if err != nil {
				t.Fatal(err)
			}
			ids, texts, lps := drainText(t, tok, s)
			if got, want := strings.Join(texts, ""), strings.Join(engineChunks, ""); got != want {
				t.Errorf("text %q, want the engine's %q", got, want)
			}
			if !slices.Equal(texts, engineChunks) {
				t.Errorf("tokens' texts %q, want one a chunk %q", texts, engineChunks)
			}
			if s.Finish() != engine.FinishStop || s.Usage().CompletionTokens != len(engineChunks)+1 {
				t.Errorf("finish %v, usage %+v; want stop and the engine's %d tokens", s.Finish(), s.Usage(), len(engineChunks)+1)
			}
			if slices.Contains(lps, nil) || len(lps) != len(engineChunks) {
				t.Errorf("logprobs %v, want the engine's one a token", lps)
			}
			// With logprobs the engine names each token by id: the ids are its own.
			if !slices.Equal(ids, out) {
				t.Errorf("ids %v, want the engine's %v", ids, out)
			}

			// Cut by max_tokens before the engine's usage arrives, the tokens counted
			// are the chunks returned. Without logprobs the ids are a guess: the
			// token spelling a chunk's text, when there is one.
			s, err = e.Generate(t.Context(), engine.Request{ID: "r2", Prompt: prompt, MaxTokens: 3, StopTokens: tok.StopTokens()})
			if err != nil {
				t.Fatal(err)
			}
			ids, texts, _ = drainText(t, tok, s)
			if strings.Join(texts, "") != " The temperature  here" || s.Usage().CompletionTokens != 3 {
				t.Errorf("max_tokens 3: text %q, usage %+v", strings.Join(texts, ""), s.Usage())
			}
			if len(ids) == 0 || tok.Piece(ids[0]) != c.piece {
				t.Errorf("first token %v, want %s", ids, c.piece)
			}
		})
	}
}
