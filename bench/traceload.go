package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
)

// ErrWorkloadDone is what a workload's Next returns when it has nothing more
// to send (a trace at its end); the run then ends when its requests are in.
var ErrWorkloadDone = errors.New("bench: the workload has no more requests")

// Preparer is a workload that needs to ask the server something before its
// first request (the model's tokens and context length, for a trace).
type Preparer interface {
	Prepare(ctx context.Context, c *Client) error
}

// probeText is tokenized by the server to learn ordinary tokens of its model:
// English words, digits and punctuation, which every vocabulary holds.
const probeText = "Once upon a time, there was a little girl named Lily. She liked to play outside in the park with her " +
	"friends, the big brown dog and the small cat. One day they found a shiny red ball under a tree. " +
	"The quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs! " +
	"0 1 2 3 4 5 6 7 8 9 10 42 100 2024 3.14 (x + y) * z = w? yes: no, maybe... " +
	"abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ"

// TraceReplay is a workload that replays a trace: each request at its
// timestamp, its prompt synthesized from its hash ids, its output length
// enforced with ignore_eos.
type TraceReplay struct {
	name      string
	reqs      []TraceRequest
	blockSize int
	seed      uint64
	reuse     float64
	// IgnoreEOS is sent with every request (NewTraceReplay sets it).
	IgnoreEOS bool
	// Warnings go into each report (TraceWindow.BlockWarning's).
	Warnings []string

	synth *Synth
	// ctxLen is the served model's context length (0: unknown, nothing cut).
	ctxLen int
	// Cut counts the requests shortened to fit the context.
	Cut int

	classes []string

	mu   sync.Mutex
	next int
}

// NewTraceReplay returns a replay of reqs, whose blocks are blockSize tokens
// (after scaling); name describes it in reports.
func NewTraceReplay(name string, reqs []TraceRequest, blockSize int, seed uint64) (*TraceReplay, error) {
	if len(reqs) == 0 {
		return nil, errors.New("bench: the trace window holds no requests")
	}
	t := &TraceReplay{name: name, reqs: reqs, blockSize: blockSize, seed: seed, reuse: PrefixReuse(reqs, blockSize), IgnoreEOS: true}
	seen := map[int64]bool{}
	for _, r := range reqs {
		lead := 0
		for lead < len(r.HashIDs) && seen[r.HashIDs[lead]] {
			lead++
		}
		class := ClassFresh
		if r.Text == "" && 2*min(lead*blockSize, r.InputLength) >= r.InputLength {
			class = ClassReuse
		}
		t.classes = append(t.classes, class)
		for _, h := range r.HashIDs {
			seen[h] = true
		}
	}
	return t, nil
}

// A replay's requests are classed by what the trace says of their prompt: one
// whose leading blocks, at least half of it, an earlier request of the window had
// (a later turn of a conversation) is reuse, the others are fresh. The first
// block alone would not do: in Mooncake's conversation trace nearly every prompt
// starts with the same block. The report then shows apart the requests a prefix
// cache can spare most of the prefill and those it cannot.
const (
	ClassFresh = "fresh"
	ClassReuse = "reuse"
)

// Name implements Workload.
func (t *TraceReplay) Name() string { return t.name }

// Len is the number of requests the replay sends.
func (t *TraceReplay) Len() int { return len(t.reqs) }

// PrefixReuse is the trace window's own reuse: the hit rate an unbounded cache
// shared by every server would have had.
func (t *TraceReplay) PrefixReuse() float64 { return t.reuse }

// Prepare implements Preparer: it learns ordinary tokens of the served model
// from the server's /tokenize, and its context length from /v1/models.
func (t *TraceReplay) Prepare(ctx context.Context, c *Client) error {
	info, err := c.ModelInfo(ctx)
	if err != nil {
		return fmt.Errorf("bench: trace: %w", err)
	}
	ids, err := c.Tokenize(ctx, info.ID, probeText)
	if err != nil {
		return fmt.Errorf("bench: trace: the prompts are made of the served model's tokens, learnt from its /tokenize: %w", err)
	}
	var maxID int64
	for _, r := range t.reqs {
		if len(r.HashIDs) > 0 {
			maxID = max(maxID, slices.Max(r.HashIDs))
		}
	}
	if t.synth, err = NewSynth(ids, t.blockSize, t.seed, maxID); err != nil {
		return err
	}
	t.ctxLen, t.Cut = info.MaxModelLen, 0
	for _, r := range t.reqs {
		if t.ctxLen > 0 && r.Text == "" && r.InputLength+r.OutputLength > t.ctxLen {
			t.Cut++
		}
	}
	return nil
}

// Next implements Workload.
func (t *TraceReplay) Next(*rand.Rand) (Request, error) {
	if t.synth == nil {
		return Request{}, errors.New("bench: the trace replay was not prepared against a server")
	}
	t.mu.Lock()
	if t.next >= len(t.reqs) {
		t.mu.Unlock()
		return Request{}, ErrWorkloadDone
	}
	r, class := t.reqs[t.next], t.classes[t.next]
	t.next++
	t.mu.Unlock()
	if r.Text != "" {
		// Its length is the server's to count; the output alone is kept inside
		// the context.
		out := r.OutputLength
		if t.ctxLen > 1 {
			out = min(out, t.ctxLen-1)
		}
		return Request{Class: class, Prompt: r.Text, MaxTokens: out, IgnoreEOS: t.IgnoreEOS, WantTokens: out, At: r.At}, nil
	}
	in, out := fitContext(r.InputLength, r.OutputLength, t.ctxLen)
	blocks := (in-1)/t.blockSize + 1
	ids, err := t.synth.Prompt(r.HashIDs[:blocks], in)
	if err != nil {
		return Request{}, fmt.Errorf("trace line %d: %w", r.Line, err)
	}
	return Request{Class: class, PromptIDs: ids, PromptTokens: in, MaxTokens: out, IgnoreEOS: t.IgnoreEOS, WantTokens: out, At: r.At}, nil
}

// fitContext shortens a request that does not fit a context of ctxLen tokens
// (0: no limit): the output keeps its length when the context allows one prompt
// token beside it, and the prompt loses its tail, so the prefix blocks it
// shares stay shared.
func fitContext(in, out, ctxLen int) (int, int) {
	if ctxLen <= 0 || in+out <= ctxLen {
		return in, out
	}
	out = min(out, ctxLen-1)
	return ctxLen - out, out
}

// Done implements Workload.
func (*TraceReplay) Done(Request, *Result) {}

// ClassOrder implements ClassOrderer.
func (*TraceReplay) ClassOrder() []string { return []string{ClassFresh, ClassReuse} }

// NoteReport implements ReportNoter: the window's own reuse, and the requests
// cut to fit the model's context.
func (t *TraceReplay) NoteReport(rep *Report) {
	reuse := t.PrefixReuse()
	rep.TraceReuse, rep.TraceCut = &reuse, t.Cut
	rep.Warnings = append(rep.Warnings, t.Warnings...)
}

var (
	_ Workload     = (*TraceReplay)(nil)
	_ Preparer     = (*TraceReplay)(nil)
	_ ReportNoter  = (*TraceReplay)(nil)
	_ ClassOrderer = (*TraceReplay)(nil)
	_ ClassOrderer = (*Mixed)(nil)
)

// traceName describes a replay for its report.
func traceName(file string, w TraceWindow, n int) string {
	parts := []string{fmt.Sprintf("trace %s [%d:%d]", file, w.Start, w.Start+n)}
	if w.Speedup != 1 {
		parts = append(parts, fmt.Sprintf("speedup %g", w.Speedup))
	}
	if w.TokenScale != 1 {
		parts = append(parts, fmt.Sprintf("token scale %g (blocks of %d)", w.TokenScale, w.ScaledBlockSize()))
	}
	return strings.Join(parts, ", ")
}
