package sim

import (
	"context"
	"io"
	"time"

	"github.com/tandem-serve/tandem/engine"
)

type seqKind uint8

const (
	kindGenerate seqKind = iota // prefilled here, then decoded
	kindPrefill                 // prefilled here for another worker: ends with its first token
	kindImported                // KV from elsewhere: decodes from its second token
)

// seq is one sequence on the device. Everything in it below the first block is
// guarded by the device's lock.
type seq struct {
	e      *Engine
	kind   seqKind
	req    engine.Request
	hash   uint64
	blocks *seqBlocks // nil while it waits in the admission queue
	max    int        // tokens it may produce
	stop   func() bool

	// prefillLeft prompt tokens are still to compute, the first prefillDone of
	// them (after the cached prefix) already are.
	prefillLeft, prefillDone int
	decoding                 bool
	produced                 int      // tokens drawn, the stop token included
	buf                      []uint32 // drawn, not yet read
	read                     int
	done                     bool // no more tokens will be drawn
	released                 bool // its blocks went back to the pool (or to an export)
	finish                   engine.FinishReason
	err                      error
	wake                     chan struct{} // cap 1: something for the reader
	enqueued, started, ended time.Time
}

// newSeq is a sequence holding sb, or (sb nil) one still to be given its blocks,
// whose prompt left to compute is then what the prefix cache would spare it now.
func (e *Engine) newSeq(req engine.Request, sb *seqBlocks, kind seqKind) *seq {
	s := &seq{e: e, kind: kind, req: req, hash: promptHash(req.Prompt), blocks: sb, max: e.outputBudget(req),
		wake: make(chan struct{}, 1)}
	switch {
	case kind == kindImported:
	case sb == nil:
		s.prefillLeft = len(req.Prompt) - e.CachedPrefix(req.Prompt)
	default:
		s.prefillLeft = len(req.Prompt) - sb.cached*e.cfg.BlockSize
	}
	return s
}

// maxTokens is the output it reserves blocks for: none for a prefill done for
// another worker, which ends with its first token.
func (s *seq) maxTokens() int {
	if s.kind == kindPrefill {
		return 0
	}
	return s.max
}

func (s *seq) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// emit draws token k = produced and ends the sequence on a stop token or its
// budget. Called with the device locked.
func (s *seq) emit(tok uint32) {
	s.produced++
	for _, st := range s.req.StopTokens {
		if tok == st {
			s.end(engine.FinishStop, nil)
			return
		}
	}
	s.buf = append(s.buf, tok)
	if s.produced >= s.max {
		s.end(engine.FinishLength, nil)
		return
	}
	s.signal()
}

// end finishes the sequence and frees its blocks (an export keeps a finished
// prefill's). Called with the device locked.
func (s *seq) end(f engine.FinishReason, err error) {
	if s.done {
		return
	}
	s.done, s.finish, s.err = true, f, err
	if s.stop != nil {
		s.stop()
	}
	s.ended = s.e.cfg.Clock.Now()
	if s.blocks != nil && !s.released && (s.kind != kindPrefill || err != nil) {
		s.released = true
		s.e.pool.Release(s.blocks.ids)
		s.e.dev.grantLocked() // the blocks may let the requests waiting for some in
	}
	s.signal()
}

// Next returns the drawn tokens in order, then io.EOF, or the error that ended
// the sequence early.
func (s *seq) Next(ctx context.Context) (uint32, error) {
	d := s.e.dev
	for {
		d.mu.Lock()
		if s.read < len(s.buf) {
			tok := s.buf[s.read]
			s.read++
			if s.read == len(s.buf) {
				s.buf, s.read = s.buf[:0], 0
				if d.paced && s.decoding && !s.done {
					d.kick() // a reader-paced sequence may run again
				}
			}
			d.mu.Unlock()
			return tok, nil
		}
		if s.done {
			err := s.err
			d.mu.Unlock()
			if err != nil {
				return 0, err
			}
			return 0, io.EOF
		}
		d.mu.Unlock()
		select {
		case <-s.wake:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// Finish and Usage are final once Next has returned io.EOF.
func (s *seq) Finish() engine.FinishReason {
	s.e.dev.mu.Lock()
	defer s.e.dev.mu.Unlock()
	return s.finish
}

// Logprobs is nil: the sim engine draws tokens from a hash, with no distribution.
func (s *seq) Logprobs() *engine.TokenLogprobs { return nil }

func (s *seq) Usage() engine.Usage {
	s.e.dev.mu.Lock()
	defer s.e.dev.mu.Unlock()
	// Completion tokens are those handed to the reader, as a stream counts them.
	u := engine.Usage{PromptTokens: len(s.req.Prompt), CompletionTokens: s.delivered()}
	if s.blocks != nil { // else it ended before it was admitted
		u.CachedTokens = s.blocks.cached * s.e.cfg.BlockSize
	}
	return u
}

// delivered counts the tokens the reader has taken.
func (s *seq) delivered() int {
	n := s.produced - (len(s.buf) - s.read)
	if s.finish == engine.FinishStop {
		n-- // the stop token was drawn but is never handed over
	}
	return n
}

// Close ends the sequence and frees its blocks at once. Safe to call twice.
func (s *seq) Close() { s.e.dev.cancel(s, context.Canceled) }
