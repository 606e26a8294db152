package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
)

// Prompts are built in cl100k tokens until the server says otherwise: a model
// with another tokenizer (stories260K's 512-token vocabulary makes about five
// tokens of a cl100k word) would see prompts several times longer than asked,
// and the shared-prefix defaults overflowed its context. ServedPrompts sizes
// them in the served model's own tokens instead, learnt from its /tokenize.

// minServedWords is the fewest one-token words a served vocabulary must offer:
// enough that random prompts of a block or more never repeat.
const minServedWords = 16

// maxCandidates bounds the words sent to /tokenize at once.
const maxCandidates = 4000

// ServedPrompts returns a prompt builder whose lengths are tokens of the model
// the client's server serves, as its completions endpoint counts them: words
// that its tokenizer holds as one token (found by tokenizing base's words in one
// /tokenize call and aligning the pieces), and the tokens it adds to every
// prompt (BOS, a SentencePiece dummy prefix), measured on two sample prompts.
// It also returns the model's context length (0 when the server does not say).
func ServedPrompts(ctx context.Context, c *Client, base *Prompts) (*Prompts, int, error) {
	info, err := c.ModelInfo(ctx)
	if err != nil {
		return nil, 0, err
	}
	cands := base.words[:min(len(base.words), maxCandidates)]
	text := strings.Join(cands, "")
	_, pieces, err := c.tokenize(ctx, info.ID, text, false, true)
	if err != nil {
		return nil, info.MaxModelLen, err
	}
	words, err := oneTokenWords(cands, pieces)
	if err != nil {
		return nil, info.MaxModelLen, err
	}
	if len(words) < minServedWords {
		return nil, info.MaxModelLen, fmt.Errorf("model %s holds only %d of %d words as one token; need %d", info.ID, len(words), len(cands), minServedWords)
	}
	p := &Prompts{tok: base.tok, words: words, served: info.ID}
	// The overhead is what a prompt costs beyond its words; two lengths must
	// agree on it, or the words merge and the lengths would be wrong.
	rng := rand.New(rand.NewPCG(1, 2))
	overhead := -1
	for _, n := range []int{64, 201} {
		s := p.words[0]
		for range n - 1 {
			s += p.words[rng.IntN(len(p.words))]
		}
		ids, _, err := c.tokenize(ctx, info.ID, s, true, false)
		if err != nil {
			return nil, info.MaxModelLen, err
		}
		o := len(ids) - n
		if o < 0 || overhead >= 0 && o != overhead {
			return nil, info.MaxModelLen, fmt.Errorf("model %s: %d one-token words tokenize to %d tokens; they merge", info.ID, n, len(ids))
		}
		overhead = o
	}
	p.overhead = overhead
	return p, info.MaxModelLen, nil
}

// spaceMarks turns SentencePiece's and byte-level BPE's space markers into spaces.
var spaceMarks = strings.NewReplacer("▁", " ", "Ġ", " ")

// oneTokenWords returns the words of text = concat(words) that the tokenizer,
// whose pieces of text are given, holds as one piece. A piece is normalized as
// SentencePiece (▁ for a space) and byte-level BPE (Ġ for a space) write it; a
// leading extra space is a SentencePiece dummy prefix.
func oneTokenWords(words, pieces []string) ([]string, error) {
	norm := make([]string, len(pieces))
	var all strings.Builder
	for i, p := range pieces {
		norm[i] = spaceMarks.Replace(p)
		all.WriteString(norm[i])
	}
	text := strings.Join(words, "")
	lead := all.Len() - len(text)
	if lead < 0 || !strings.HasSuffix(all.String(), text) || strings.TrimSpace(all.String()[:lead]) != "" {
		return nil, errors.New("the tokenizer's pieces do not spell the text back; cannot align them")
	}
	// Piece i spans [start, end) of text; word j spans [ws, we).
	spans := map[[2]int]bool{}
	pos := -lead
	for _, p := range norm {
		spans[[2]int{pos, pos + len(p)}] = true
		pos += len(p)
	}
	var out []string
	pos = 0
	for _, w := range words {
		if spans[[2]int{pos, pos + len(w)}] {
			out = append(out, w)
		}
		pos += len(w)
	}
	return out, nil
}

// sizeNote says how prompts are sized, for stderr.
func (p *Prompts) sizeNote() string {
	if p.served == "" {
		return "prompts sized in cl100k tokens"
	}
	return fmt.Sprintf("prompts sized in %s's tokens: %d one-token words, %d tokens added to each prompt", p.served, len(p.words), p.overhead)
}
