package openaihttp

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

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
	// TextTokens: the engine streams only text, which the worker tokenizes with
	// the model's tokenizer. Exact for byte-level BPE vocabularies whenever the
	// engine's detokenizer is; a token's text may split differently than the
	// model drew it, so the ids are not always the model's own.
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
	e.log.Warn("the engine returns no token ids: the worker tokenizes its text (token mode text)")
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

// textTokens tokenizes streamed text as it arrives. The last token of what has
// arrived may still grow ("hel" + "lo"), so it is held back until more text
// follows or the stream ends.
type textTokens struct {
	tok     tokenizer.Tokenizer
	pending string
}

func (t *textTokens) add(s string) []uint32 {
	t.pending += s
	ids := t.tok.Encode(t.pending)
	if len(ids) < 2 {
		return nil
	}
	head := ids[:len(ids)-1]
	prefix := t.tok.Decode(head)
	rest, ok := strings.CutPrefix(t.pending, prefix)
	if !ok {
		// The head's text is not a prefix of the pending text (a tokenizer that
		// adds a space prefix): send it all rather than hold text back forever.
		t.pending = ""
		return ids
	}
	t.pending = rest
	return head
}

func (t *textTokens) flush() []uint32 {
	if t.pending == "" {
		return nil
	}
	ids := t.tok.Encode(t.pending)
	t.pending = ""
	return ids
}
