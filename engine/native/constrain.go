package native

import (
	"fmt"
	"math/bits"
	"slices"
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
	resample := sp
	resample.Seed ^= 0x9e3779b97f4a7c15
	n := 0
	for _, w := range mask {
		n += bits.OnesCount64(w)
	}
	if m.Complete() {
		n += len(s.req.StopTokens)
	}
	if n == 0 {
		return 0, false
	}
	stops := func(yield func(int) bool) { // the stop tokens allowed now
		if m.Complete() {
			for _, t := range s.req.StopTokens {
				if int(t) < vocab && !yield(int(t)) {
					return
				}
			}
		}
	}
	// allowedIDs are the ids allowed now, stop tokens last: a client's stop token
	// that spells text ends the answer, so it too waits for the text to be complete.
	allowedIDs := func(yield func(int) bool) {
		for wi, w := range mask {
			for w != 0 {
				i := wi*64 + bits.TrailingZeros64(w)
				if !s.isStop(uint32(i)) && !yield(i) {
					return
				}
				w &= w - 1
			}
		}
		stops(yield)
	}
	if n <= vocab/8 {
		// Outside a string few tokens are allowed: draw among them alone, their
		// logits gathered in id order (as sample breaks ties by id).
		cands := sc.smp.cands[:0]
		for i := range allowedIDs {
			cands = append(cands, int32(i))
		}
		slices.Sort(cands)
		sc.smp.cands = cands
		sub := sc.smp.maskBuf(len(cands))
		for i, c := range cands {
			sub[i] = logits[c]
		}
		return uint32(cands[sc.smp.sample(sub, len(sub), resample, s.outputs())]), true
	}
	topP := sp.TopP
	switch {
	case sp.Temperature <= 0:
		best := -1
		for i := range allowedIDs {
			if best < 0 || logits[i] > logits[best] || logits[i] == logits[best] && i < best {
				best = i
			}
		}
		return uint32(best), true
	case sp.TopK <= 0 && (topP <= 0 || topP >= 1):
		// Plain temperature: the first draw left every token's weight in probs;
		// the masked draw needs only their sum over the allowed ones, no exp again.
		probs := sc.smp.probs[:vocab]
		var total float64
		for i := range allowedIDs {
			total += float64(probs[i])
		}
		target, last := uniform(resample.Seed, s.outputs())*total, -1
		var acc float64
		for i := range allowedIDs {
			acc += float64(probs[i])
			if last = i; acc > target {
				return uint32(i), true
			}
		}
		return uint32(last), true
	}
	masked := sc.smp.maskBuf(vocab)
	for w := 0; w*64 < vocab; w++ {
		lo, hi := w*64, min(w*64+64, vocab)
		var bits uint64
		if w < len(mask) {
			bits = mask[w]
		}
		switch {
		case bits == 0:
			for i := lo; i < hi; i++ {
				masked[i] = maskedOut
			}
		case bits == ^uint64(0):
			copy(masked[lo:hi], logits[lo:hi])
		default:
			for i := lo; i < hi; i++ {
				if bits>>(i-lo)&1 != 0 {
					masked[i] = logits[i]
				} else {
					masked[i] = maskedOut
				}
			}
		}
	}
	for _, t := range s.req.StopTokens {
		if int(t) < vocab {
			masked[t] = maskedOut
		}
	}
	for t := range stops {
		masked[t] = logits[t]
	}
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
