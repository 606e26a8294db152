package bench

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tandem-serve/tandem/tokenizer"
)

// Prompts builds random prompts of an exact length in a tokenizer's tokens.
//
// Each prompt is a run of words, each a space and lower-case letters that the
// vocabulary holds as one token. A byte-level BPE of the cl100k family splits text
// before a space that follows a letter, so such words never merge with their
// neighbours: n words are n tokens, which Make checks. Random words make every
// prompt's first block distinct, so no prompt hits another's prefix cache unless a
// workload shares a prefix on purpose.
type Prompts struct {
	tok   tokenizer.Tokenizer
	words []string
	// served names the model whose tokens the words are (ServedPrompts); then
	// overhead is the tokens its server adds to every prompt, and tok only
	// counts text the server did not (Count).
	served   string
	overhead int
}

// NewPrompts finds the one-token words in tok's vocabulary.
func NewPrompts(tok tokenizer.Tokenizer) (*Prompts, error) {
	p := &Prompts{tok: tok}
	for id := range uint32(tok.VocabSize()) {
		if tok.IsSpecial(id) {
			continue
		}
		b, ok := tok.TokenBytes(id)
		if !ok || !isSpaceWord(b) {
			continue
		}
		if ids := tok.Encode(string(b)); len(ids) == 1 && ids[0] == id {
			p.words = append(p.words, string(b))
		}
	}
	if len(p.words) < 100 {
		return nil, fmt.Errorf("bench: tokenizer %s has only %d one-token words; cannot build prompts", tok.Name(), len(p.words))
	}
	return p, nil
}

// isSpaceWord reports whether b is a space followed by 3 to 12 lower-case letters.
func isSpaceWord(b []byte) bool {
	if len(b) < 4 || len(b) > 13 || b[0] != ' ' {
		return false
	}
	for _, c := range b[1:] {
		if c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}

var (
	cl100kPromptsOnce sync.Once
	cl100kPrompts     *Prompts
	cl100kPromptsErr  error
)

// CL100KPrompts returns the prompt builder for cl100k_base, tandem's vocabulary,
// built once.
func CL100KPrompts() (*Prompts, error) {
	cl100kPromptsOnce.Do(func() {
		tok, err := tokenizer.CL100K()
		if err != nil {
			cl100kPromptsErr = err
			return
		}
		cl100kPrompts, cl100kPromptsErr = NewPrompts(tok)
	})
	return cl100kPrompts, cl100kPromptsErr
}

// Tokenizer returns the tokenizer the prompts are measured in.
func (p *Prompts) Tokenizer() tokenizer.Tokenizer { return p.tok }

// Make returns a random text of exactly n tokens (for a served model's
// prompts, as its completions endpoint counts them, BOS included).
func (p *Prompts) Make(rng *rand.Rand, n int) (string, error) {
	if n < 1 {
		return "", errors.New("bench: a prompt needs at least one token")
	}
	words := n - p.overhead
	if words < 1 {
		return "", fmt.Errorf("bench: a prompt of %d tokens is too short: model %s adds %d tokens to every prompt", n, p.served, p.overhead)
	}
	var sb strings.Builder
	sb.Grow(words * 8)
	for range words {
		sb.WriteString(p.words[rng.IntN(len(p.words))])
	}
	s := sb.String()
	if p.served != "" {
		// Checked against the server's tokenizer when the words were chosen.
		return s, nil
	}
	if got := len(p.tok.Encode(s)); got != n {
		return "", fmt.Errorf("bench: built a %d-token prompt but it encodes to %d tokens", n, got)
	}
	return s, nil
}

// Count returns the number of tokens in s: exact for the local tokenizer, an
// estimate for a served model's (the server's usage is recorded beside it).
func (p *Prompts) Count(s string) int { return len(p.tok.Encode(s)) }

// NewHTTPClient returns an HTTP client that keeps up to conns connections per
// host open, so a benchmark measures the server rather than TCP handshakes.
func NewHTTPClient(conns int) *http.Client {
	if conns < 2 {
		conns = 2
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = conns * 2
	t.MaxIdleConnsPerHost = conns * 2
	t.MaxConnsPerHost = 0
	t.ResponseHeaderTimeout = 0
	t.IdleConnTimeout = 90 * time.Second
	return &http.Client{Transport: t}
}
