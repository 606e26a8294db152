package native

import (
	"fmt"
	"sync"

	"github.com/tandem-serve/tandem/constrain"
	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/tokenizer"
)

// constraintCacheSize is how many compiled constraints an engine keeps, each with
// the states and masks its sequences have reached.
const constraintCacheSize = 64

// maskedOut is the logit of a token a constraint forbids: below banned, so a
// token logit_bias bans still wins over one the constraint forbids.
const maskedOut = -3e38

// constraints is the engine's cache of constraints compiled for its vocabulary,
// built on first use (an engine never asked for one never reads the tokenizer).
type constraints struct {
	once  sync.Once
	cache *constrain.Cache
	err   error
}

func (e *Engine) constraintCache() (*constrain.Cache, error) {
	c := &e.constr
	c.once.Do(func() {
		tok := e.cfg.Tokenizer
		if tok == nil {
			if e.src != nil {
				tok, c.err = tokenizer.FromGGUF(e.src)
			} else {
				tok, c.err = tokenizer.CL100K()
			}
			if c.err != nil {
				c.err = fmt.Errorf("native: no tokenizer to compile constraints against: %w", c.err)
				return
			}
		}
		c.cache = constrain.NewCache(vocabulary(tok, e.mc.VocabSize), constraintCacheSize)
	})
	return c.cache, c.err
}

// vocabulary is each token's bytes as the tokenizer decodes them (SentencePiece's
// ▁ as a space, <0xNN> byte tokens as their byte, GPT-2's byte-level alphabet as
// raw bytes); special and control tokens get none, so no mask ever allows them.
func vocabulary(tok tokenizer.Tokenizer, size int) *constrain.Vocabulary {
	toks := make([][]byte, size)
	for id := range min(size, tok.VocabSize()) {
		if tok.IsSpecial(uint32(id)) {
			continue
		}
		if b, ok := tok.TokenBytes(uint32(id)); ok {
			toks[id] = b
		}
	}
	return constrain.NewVocabulary(toks)
}

func specOf(c *engine.Constraint) constrain.Spec {
	return constrain.Spec{JSONSchema: c.JSONSchema, Prefix: c.Prefix, Suffix: c.Suffix, Repeat: c.Repeat, Separator: c.Separator}
}

// checkConstraint compiles req's constraint (once per constraint), so a schema the
// engine cannot enforce is refused before the request is queued.
func (e *Engine) checkConstraint(req engine.Request) error {
	c := req.Sampling.Constraint
	if c == nil {
		return nil
	}
	cache, err := e.constraintCache()
	if err == nil {
		_, err = cache.Automaton(specOf(c))
	}
	if err != nil {
		return fmt.Errorf("%w: %v", engine.ErrBadConstraint, err)
	}
	return nil
}

// matcher returns s's matcher, advanced over every token s has drawn so far: on a
// decode worker that imported the KV, the first token was drawn by the prefill
// worker under the same constraint.
func (e *Engine) matcher(s *sequence) (*constrain.Matcher, error) {
	if s.matcher == nil {
		cache, err := e.constraintCache()
		if err != nil {
			return nil, err
		}
		a, err := cache.Automaton(specOf(s.req.Sampling.Constraint))
		if err != nil {
			return nil, err
		}
		s.matcher = a.NewMatcher()
	}
	for ; s.fed < s.outputs(); s.fed++ {
		if tok := s.tokens[s.promptLen+s.fed]; !s.matcher.Advance(tok) {
			return nil, fmt.Errorf("native: output token %d (%d) does not fit the request's constraint", s.fed, tok)
		}
	}
	return s.matcher, nil
}

// drawConstrained draws s's next token from logits among those m allows (a stop
// token only once the text is complete). The token drawn unconstrained is checked
// first; only when m refuses it is the whole mask applied and the draw repeated
// with fresh randomness, which together draw from the masked distribution. ok is
// false when no token is allowed.
func (sc *sched) drawConstrained(s *sequence, m *constrain.Matcher, logits []float32, sp engine.Sampling) (tok uint32, ok bool) {
	vocab := sc.e.mc.VocabSize
	allowed := func(t uint32) bool {
		if s.isStop(t) {
			return m.Complete()
		}
		return m.Accepts(t)
	}
	sc.e.constrainedDraws.Add(1)
	tok = sc.smp.sample(logits, vocab, sp, s.outputs())
	if allowed(tok) {
		return tok, true
	}
	sc.e.maskedDraws.Add(1)
	mask := m.Mask()
	masked := sc.smp.maskBuf(vocab)
	some := false
	for w := 0; w*64 < vocab; w++ {
		lo, hi := w*64, min(w*64+64, vocab)
		var bits uint64
		if w < len(mask) {
			bits = mask[w]
		}
		switch {
		case bits == 0: // most words outside a string: nothing allowed
			for i := lo; i < hi; i++ {
				masked[i] = maskedOut
			}
		case bits == ^uint64(0): // most words inside one: everything
			copy(masked[lo:hi], logits[lo:hi])
			some = true
		default:
			for i := lo; i < hi; i++ {
				if bits>>(i-lo)&1 != 0 {
					masked[i], some = logits[i], true
				} else {
					masked[i] = maskedOut
				}
			}
		}
	}
	if m.Complete() {
		for _, t := range s.req.StopTokens {
			if int(t) < vocab {
				masked[t], some = logits[t], true
			}
		}
	}
	if !some {
		return 0, false
	}
	resample := sp
	resample.Seed ^= 0x9e3779b97f4a7c15
	tok = sc.smp.sample(masked, vocab, resample, s.outputs())
	if masked[tok] == maskedOut { // every allowed token was banned by logit_bias too
		for i := range vocab {
			if masked[i] != maskedOut {
				return uint32(i), true
			}
		}
	}
	return tok, true
}
