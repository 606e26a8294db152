package openaihttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/tandem-serve/tandem/engine"
)

// stream is one streamed completion, token by token.
type stream struct {
	e      *Engine
	req    engine.Request
	ctx    context.Context // the HTTP request's
	cancel context.CancelCauseFunc
	dog    *watchdog
	body   io.ReadCloser
	ev     *events
	text   *textTokens // text mode
	// Text mode: the texts of pending's tokens, of the token Next returned last,
	// and the engine's count of the tokens it generated, when it sent one.
	pendingText   []string
	lastText      string
	engineTokens  int
	engineCounted bool

	pending   []uint32
	pendingLP []*engine.TokenLogprobs
	lastLP    *engine.TokenLogprobs
	finish    engine.FinishReason
	finished  bool // the engine sent a finish reason
	done      bool
	returned  int
	usage     engine.Usage
	closeOnce sync.Once
	// promptLPs are the prompt's logprobs, for a request that asked.
	promptLPs []engine.TokenLogprobs

	// The context Next was last called with, bound to cancel once rather than
	// per token (an AfterFunc registration per token was a lock and an
	// allocation on every decode step). Close may run on another goroutine.
	bindMu  sync.Mutex
	bound   context.Context
	unbind  func() bool
	unbound bool // Close ran: bind nothing more
}

var (
	_ engine.TextStream           = (*stream)(nil)
	_ engine.PromptLogprobsStream = (*stream)(nil)
)

func newStream(e *Engine, req engine.Request, ctx context.Context, cancel context.CancelCauseFunc, dog *watchdog,
	body io.ReadCloser) *stream {
	s := &stream{e: e, req: req, ctx: ctx, cancel: cancel, dog: dog, body: body, ev: newEvents(body),
		usage: engine.Usage{PromptTokens: len(req.Prompt)}}
	if e.mode == TextTokens {
		s.text = &textTokens{tok: e.cfg.Tokenizer, ids: &e.pieces}
	}
	return s
}

// Next returns the next token; io.EOF after the last. A stop token ends the
// stream and is not returned, as engine.Stream requires, whether or not the
// engine included it in its token ids.
func (s *stream) Next(ctx context.Context) (uint32, error) {
	s.bind(ctx)
	for len(s.pending) == 0 {
		if s.done {
			return 0, io.EOF
		}
		if err := s.read(); err != nil {
			return 0, s.e.count(s.fail(ctx, err))
		}
	}
	tok := s.pending[0]
	s.pending = s.pending[1:]
	s.lastLP = nil
	if len(s.pendingLP) > 0 {
		s.lastLP, s.pendingLP = s.pendingLP[0], s.pendingLP[1:]
	}
	if s.text != nil {
		s.lastText, s.pendingText = s.pendingText[0], s.pendingText[1:]
	}
	// In text mode the engine applied the stop tokens itself (textTokens.chunk
	// drops its stop token's chunk), and an id may be a guess that must not end
	// the stream.
	if s.text == nil && slices.Contains(s.req.StopTokens, tok) {
		s.end(engine.FinishStop)
		return 0, io.EOF
	}
	s.returned++
	if s.req.MaxTokens > 0 && s.returned >= s.req.MaxTokens {
		// The engine stops there too; what it sent beyond is not the client's.
		s.pending, s.pendingLP, s.pendingText = nil, nil, nil
		if !s.finished {
			s.finish, s.finished = engine.FinishLength, true
		}
		s.reachedEnd()
	}
	return tok, nil
}

// fail ends the stream on a read error and says why, as the caller should see
// it: the caller's own cancel, a wait that outlived its bound, or the engine's
// failure named with the engine. The causes are read before Close, whose own
// cancel would otherwise pass every engine failure off as a client's cancel.
func (s *stream) fail(ctx context.Context, err error) error {
	callerErr, cause := ctx.Err(), context.Cause(s.ctx)
	var stall *StallError
	switch {
	case callerErr != nil:
		err = callerErr
	case errors.As(cause, &stall):
		err = stall
	case cause != nil:
		err = cause // the request's context ended, or Close ran meanwhile
	case errors.Is(err, engine.ErrUnavailable):
	default:
		err = fmt.Errorf("%s: %w", s.e.where(), err)
	}
	streamEnded(s.body, err)
	s.Close()
	return err
}

// bind makes ctx's end abort the engine's request. The caller's context may
// differ from the one the request was started with: either ending aborts it.
// Callers pass the same context to every Next, so this registers once; a new
// context replaces the old binding (the old one no longer governs the stream,
// as when each Next had its own).
func (s *stream) bind(ctx context.Context) {
	s.bindMu.Lock()
	defer s.bindMu.Unlock()
	if s.unbound || ctx == s.bound {
		return
	}
	if s.unbind != nil {
		s.unbind()
	}
	s.bound, s.unbind = ctx, context.AfterFunc(ctx, func() { s.cancel(context.Cause(ctx)) })
}

func (s *stream) end(f engine.FinishReason) {
	s.finish, s.finished = f, true
	s.pending, s.pendingLP, s.pendingText = nil, nil, nil
	s.reachedEnd()
}

// reachedEnd marks the stream done, on the reading goroutine (Close may run on
// another): a stream closed before this, and without failing, says nothing of
// how it ended (its caller stopped reading).
func (s *stream) reachedEnd() {
	s.done = true
	s.dog.stop()
	streamEnded(s.body, nil)
}

// read takes the next event off the wire into pending.
func (s *stream) read() error {
	data, err := s.ev.next()
	switch {
	case errors.Is(err, errDone), errors.Is(err, io.EOF) && s.finished:
		if !s.finished {
			// A stream that ends with [DONE] but no finish reason ended on its own.
			s.finish, s.finished = engine.FinishStop, true
		}
		s.reachedEnd()
		return nil
	case errors.Is(err, io.EOF):
		return fmt.Errorf("the stream ended without a finish reason after %d tokens: %w", s.returned, io.ErrUnexpectedEOF)
	case err != nil:
		return fmt.Errorf("reading the stream after %d tokens: %w", s.returned, err)
	}
	s.dog.arm("next token", boundToken)
	chunk, err := ParseCompletion(data)
	if err != nil {
		return err
	}
	if u := chunk.Usage; u != nil {
		s.usage.PromptTokens = u.PromptTokens
		if d := u.PromptTokensDetails; d != nil {
			s.usage.CachedTokens = d.CachedTokens
		}
		s.engineTokens, s.engineCounted = u.CompletionTokens, true
	}
	for _, c := range chunk.Choices {
		if c.Index != 0 {
			continue // tandem asks for one choice
		}
		toks, err := s.tokens(c)
		if err != nil {
			return err
		}
		if s.req.Logprobs {
			lps := logprobsOf(c.Logprobs, len(toks), s.req.TopLogprobs)
			s.pendingLP = append(s.pendingLP, lps...)
		}
		s.pending = append(s.pending, toks...)
		if c.FinishReason != nil && *c.FinishReason != "" {
			switch *c.FinishReason {
			case "length":
				s.finish = engine.FinishLength
			case "abort":
				return fmt.Errorf("%w: %s aborted the request", engine.ErrUnavailable, s.e.where())
			default: // "stop", and reasons OpenAI added since ("content_filter")
				s.finish = engine.FinishStop
			}
			s.finished = true
		}
	}
	return nil
}

// tokens are a choice's new token ids, read as the engine's token mode says.
func (s *stream) tokens(c Choice) ([]uint32, error) {
	var toks []uint32
	switch s.e.mode {
	case TokenIDs:
		toks = c.TokenIDs
	case LogprobTokens:
		if c.Logprobs != nil {
			for _, t := range c.Logprobs.Tokens {
				id, ok := tokenIDOf(t)
				if !ok {
					return nil, fmt.Errorf("logprobs token %q is not token_id:N (is return_tokens_as_token_ids honoured?)", t)
				}
				toks = append(toks, id)
			}
		}
	case TextTokens:
		var texts []string
		toks, texts = s.text.chunk(c)
		s.pendingText = append(s.pendingText, texts...)
	}
	vocab := uint32(s.e.cfg.Tokenizer.VocabSize())
	for _, t := range toks {
		if t >= vocab {
			return nil, fmt.Errorf("token id %d is outside the tokenizer's vocabulary of %d: is the tokenizer the model's?", t, vocab)
		}
	}
	return toks, nil
}

func (s *stream) Logprobs() *engine.TokenLogprobs { return s.lastLP }
func (s *stream) Finish() engine.FinishReason     { return s.finish }

// Text is the engine's text for the token Next returned last, in text mode.
func (s *stream) Text() (string, bool) { return s.lastText, s.text != nil }

// Usage counts the tokens this stream returned, which is what the client was
// sent, and the prompt and cache as the engine reported them. In text mode the
// tokens are the engine's count when it sent one (its usage chunk), else the
// chunks returned.
func (s *stream) Usage() engine.Usage {
	u := s.usage
	u.CompletionTokens = s.returned
	if s.text != nil && s.engineCounted {
		u.CompletionTokens = s.engineTokens
	}
	return u
}

// Close cancels the engine's request, which aborts it there and frees its KV.
func (s *stream) Close() {
	s.closeOnce.Do(func() {
		s.bindMu.Lock()
		s.unbound = true
		if s.unbind != nil {
			s.unbind() // the registration would otherwise live as long as ctx
		}
		s.bindMu.Unlock()
		s.dog.stop()
		s.cancel(nil)
		_ = s.body.Close()
	})
}
