package native

import (
	"context"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/tandem-serve/tandem/constrain"
	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/kvcache"
)

type seqKind int

const (
	kindGenerate seqKind = iota // prefill here, then decode
	kindPrefill                 // prefill, draw the first token, hand the blocks to an Export
	kindImport                  // KV arrived from elsewhere; decode only
)

type seqState int

const (
	stateNew     seqState = iota // submitted, not yet seen by the scheduler
	stateWaiting                 // holds no blocks; (re)prefill pending
	stateRunning                 // admitted: holds blocks
	stateDone                    // the scheduler is finished with it
)

// sequence is one request. The scheduler goroutine owns every field above out;
// other goroutines touch only out, and released once it is closed.
type sequence struct {
	req     engine.Request
	kind    seqKind
	arrival uint64 // admission priority: older first, and preempted last-in first

	state     seqState
	tokens    []uint32 // prompt, then every token drawn so far
	promptLen int
	computed  int // leading tokens whose K and V are in blocks
	blocks    []kvcache.BlockID
	hashes    []uint64 // chained hashes of tokens' full blocks, computed as they fill
	stored    int      // leading blocks already offered to the prefix cache
	admitted  bool     // has been admitted once (cached tokens are counted then)

	queuedAt, startedAt, doneAt time.Time

	matcher *constrain.Matcher // the constraint's parse of the output; nil until the first constrained draw
	fed     int                // output tokens matcher has read

	// promptLPs[i] is prompt token i+1's logprobs, for a request that asked
	// (PromptLogprobs); promptDone once every one is computed and handed out.
	promptLPs  []engine.TokenLogprobs
	promptDone bool

	export   *export       // kindPrefill: the result
	released chan struct{} // closed when the scheduler has let go of the sequence
	stopCtx  func() bool   // detaches the context watcher

	out outbox
}

func newSequence(req engine.Request, kind seqKind) *sequence {
	s := &sequence{
		req:       req,
		kind:      kind,
		tokens:    slices.Clip(slices.Clone(req.Prompt)),
		promptLen: len(req.Prompt),
		queuedAt:  time.Now(),
		released:  make(chan struct{}),
	}
	s.out.notify = make(chan struct{})
	s.out.usage.PromptTokens = len(req.Prompt)
	if req.PromptLogprobs {
		s.promptLPs = make([]engine.TokenLogprobs, len(req.Prompt)-1)
	}
	return s
}

// wantsPromptLogprobs reports whether s still needs its prompt's logprobs computed.
func (s *sequence) wantsPromptLogprobs() bool { return s.req.PromptLogprobs && !s.promptDone }

// outputs counts the tokens drawn so far, which is also the output position of the
// next draw.
func (s *sequence) outputs() int { return len(s.tokens) - s.promptLen }

func (s *sequence) isStop(tok uint32) bool { return slices.Contains(s.req.StopTokens, tok) }

// outbox is where the scheduler leaves tokens for the stream's reader.
type outbox struct {
	mu       sync.Mutex
	toks     []uint32
	lps      []*engine.TokenLogprobs // beside toks, for a request that asked
	promptLP []engine.TokenLogprobs  // the prompt's, set before the first token
	read     int
	finished bool
	finish   engine.FinishReason
	err      error
	usage    engine.Usage
	notify   chan struct{} // closed and replaced on every change
}

func (o *outbox) changed() {
	close(o.notify)
	o.notify = make(chan struct{})
}

func (o *outbox) emit(tok uint32, lp *engine.TokenLogprobs) {
	o.mu.Lock()
	o.toks = append(o.toks, tok)
	if lp != nil {
		o.lps = append(o.lps, make([]*engine.TokenLogprobs, len(o.toks)-len(o.lps)-1)...)
		o.lps = append(o.lps, lp)
	}
	o.usage.CompletionTokens++
	o.changed()
	o.mu.Unlock()
}

// end finishes the stream once; later calls change nothing.
func (o *outbox) end(f engine.FinishReason, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.finished {
		return
	}
	o.finished, o.finish, o.err = true, f, err
	o.changed()
}

func (o *outbox) setPromptLogprobs(lps []engine.TokenLogprobs) {
	o.mu.Lock()
	o.promptLP = lps
	o.mu.Unlock()
}

func (o *outbox) setCached(n int) {
	o.mu.Lock()
	o.usage.CachedTokens = n
	o.mu.Unlock()
}

// stream is the engine.Stream of a generating or imported sequence.
type stream struct {
	e    *Engine
	seq  *sequence
	last *engine.TokenLogprobs
}

func (st *stream) Next(ctx context.Context) (uint32, error) {
	o := &st.seq.out
	for {
		o.mu.Lock()
		if o.read < len(o.toks) {
			t := o.toks[o.read]
			st.last = nil
			if o.read < len(o.lps) {
				st.last = o.lps[o.read]
			}
			o.read++
			o.mu.Unlock()
			return t, nil
		}
		if o.finished {
			err := o.err
			o.mu.Unlock()
			if err == nil {
				err = io.EOF
			}
			return 0, err
		}
		ch := o.notify
		o.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// Logprobs implements engine.Stream.
func (st *stream) Logprobs() *engine.TokenLogprobs { return st.last }

// PromptLogprobs implements engine.PromptLogprobsStream.
func (st *stream) PromptLogprobs() []engine.TokenLogprobs {
	o := &st.seq.out
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.promptLP
}

func (st *stream) Finish() engine.FinishReason {
	o := &st.seq.out
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.finish
}

func (st *stream) Usage() engine.Usage {
	o := &st.seq.out
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.usage
}

// Close cancels the sequence and returns once its blocks are back in the pool: at
// the end of the forward pass in flight, if the sequence is in it.
func (st *stream) Close() {
	st.e.cancel(st.seq, nil)
	st.e.awaitRelease(st.seq)
}
