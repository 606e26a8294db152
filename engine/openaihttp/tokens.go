package openaihttp

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/tokenizer"
)

// TokenMode is how the engine's generated token ids come back.
type TokenMode string

const (
	// TokenAuto asks the engine at start which of the others it supports.
	TokenAuto TokenMode = "auto"
	// TokenIDs: each chunk's choices[].token_ids (vLLM >= 0.10.2 and SGLang with
	// return_token_ids, TensorRT-LLM with detokenize=false).
	TokenIDs TokenMode = "token_ids"
	// LogprobTokens: logprobs' tokens written "token_id:N" (vLLM's
	// return_tokens_as_token_ids, for versions without return_token_ids).
	LogprobTokens TokenMode = "logprobs"
	// TextTokens: the engine streams only text. Each chunk is one token whose
	// text is the engine's, passed on exactly (engine.TextStream); its id is the
	// tokenizer's best guess (textTokens).
	TextTokens TokenMode = "text"
)

// TokenModes lists the valid modes.
var TokenModes = []TokenMode{TokenAuto, TokenIDs, LogprobTokens, TextTokens}

// settleTokenMode returns want, or with TokenAuto the first mode a one-token
// probe shows the engine honours: token ids, then logprob token ids, then text.
func (e *Engine) settleTokenMode(ctx context.Context, want TokenMode) (TokenMode, error) {
	if want != "" && want != TokenAuto {
		if !slices.Contains(TokenModes, want) {
			return "", fmt.Errorf("token mode %q: want one of %v", want, TokenModes)
		}
		return want, nil
	}
	prompt := []uint32{0}
	if bos, ok := e.cfg.Tokenizer.BOS(); ok {
		prompt[0] = bos
	}
	probe := engine.Request{ID: "tandem-probe-token-mode", Prompt: prompt, MaxTokens: 1}
	try := func(mode TokenMode) (bool, error) {
		e.mode = mode
		resp, err := e.Complete(ctx, probe.ID, e.Body(probe, false))
		if err != nil {
			return false, fmt.Errorf("%s: probing how token ids come back: %w", e.d.Name, err)
		}
		if len(resp.Choices) == 0 {
			return false, fmt.Errorf("%s: probing how token ids come back: an answer with no choice", e.d.Name)
		}
		c := resp.Choices[0]
		switch mode {
		case TokenIDs:
			return len(c.TokenIDs) > 0, nil
		case LogprobTokens:
			if c.Logprobs == nil || len(c.Logprobs.Tokens) == 0 {
				return false, nil
			}
			_, ok := tokenIDOf(c.Logprobs.Tokens[0])
			return ok, nil
		}
		return true, nil
	}
	modes := []TokenMode{TokenIDs}
	if e.d.LogprobTokenIDs {
		modes = append(modes, LogprobTokens)
	}
	for _, m := range modes {
		ok, err := try(m)
		if err != nil {
			return "", err
		}
		if ok {
			return m, nil
		}
	}
	e.log.Warn("the engine returns no token ids: its text is passed on, one token a chunk, the ids guessed (token mode text)")
	return TextTokens, nil
}

// tokenIDOf reads vLLM's "token_id:N".
func tokenIDOf(s string) (uint32, bool) {
	n, ok := strings.CutPrefix(s, "token_id:")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(n, 10, 32)
	return uint32(id), err == nil
}

// logprobsOf converts n tokens' legacy logprobs: each token's own, and the
// alternatives the engine named by id ("token_id:N"); alternatives named only by
// text are left out rather than guessed. It returns nil entries when the engine
// sent fewer than n.
func logprobsOf(lp *Logprobs, n, top int) []*engine.TokenLogprobs {
	out := make([]*engine.TokenLogprobs, n)
	if lp == nil || len(lp.TokenLogprobs) != n {
		return out
	}
	for i := range n {
		if lp.TokenLogprobs[i] == nil {
			continue
		}
		t := &engine.TokenLogprobs{Logprob: float32(*lp.TokenLogprobs[i])}
		if i < len(lp.TopLogprobs) {
			for k, v := range lp.TopLogprobs[i] {
				if id, ok := tokenIDOf(k); ok {
					t.Top = append(t.Top, engine.Logprob{Token: id, Logprob: float32(v)})
				}
			}
			slices.SortFunc(t.Top, func(a, b engine.Logprob) int {
				return cmp.Or(cmp.Compare(b.Logprob, a.Logprob), cmp.Compare(a.Token, b.Token))
			})
			t.Top = t.Top[:min(len(t.Top), top, engine.MaxTopLogprobs)]
		}
		out[i] = t
	}
	return out
}

// textTokens reads text mode's chunks, each choice's text one token whose text is
// exactly the engine's. vLLM, and the servers that copy its API, send a token per
// chunk, with empty text for a token that ends inside a character (the character
// comes whole with the token that completes it), so the chunks are the model's
// tokens and their texts joined are the answer. Tokenizing the text again does
// not give that back: a SentencePiece tokenizer puts its word-start "▁" before
// text that already begins with a space, and splits words other than the model
// drew them, so the text decoded from those ids is not the engine's.
//
// The ids are the engine's when its logprobs name the chunk's token by id (vLLM's
// return_tokens_as_token_ids, asked for with logprobs), else a best guess (the
// token whose text is exactly the chunk's, else the first of the chunk's
// tokenization, 0 for empty text): nothing reads them as the model's. A server
// that sends several tokens in one chunk has them counted as one; usage is the
// engine's own count when it reports one.
type textTokens struct {
	tok tokenizer.Tokenizer
	ids *pieceIDs
}

// chunk returns choice c's token and its text; none for the chunk of a stop
// token, which has no text (the engine leaves it out) and finish reason "stop".
func (t textTokens) chunk(c Choice) ([]uint32, []string) {
	if c.Text == "" && c.FinishReason != nil && *c.FinishReason == "stop" {
		return nil, nil
	}
	if lp := c.Logprobs; lp != nil && len(lp.Tokens) == 1 {
		if id, ok := tokenIDOf(lp.Tokens[0]); ok {
			return []uint32{id}, []string{c.Text}
		}
	}
	return []uint32{t.ids.guess(t.tok, c.Text)}, []string{c.Text}
}

// pieceIDs finds a token by its text. It is built on first use, so that only an
// engine in text mode holds a map of its vocabulary.
type pieceIDs struct {
	once   sync.Once
	byText map[string]uint32
}

func (p *pieceIDs) guess(tok tokenizer.Tokenizer, text string) uint32 {
	p.once.Do(func() {
		p.byText = make(map[string]uint32, tok.VocabSize())
		// A later id wins: SentencePiece's byte tokens (<0x41>) come before the
		// pieces spelling the same text ("A").
		for id := range uint32(tok.VocabSize()) {
			if b, _ := tok.TokenBytes(id); len(b) > 0 && !tok.IsSpecial(id) {
				p.byText[string(b)] = id
			}
		}
	})
	if id, ok := p.byText[text]; ok {
		return id
	}
	if ids := tok.Encode(text); len(ids) > 0 {
		return ids[0]
	}
	return 0
}
