package sim

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/tandem-serve/tandem/engine"
)

// Clock is the time a simulated device runs on.
type Clock interface {
	Now() time.Time
	// Sleep waits d, or until ctx ends.
	Sleep(ctx context.Context, d time.Duration) error
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Step is what one engine step ran, for OnStep and tests.
type Step struct {
	At       float64 // the device's modelled time when the step began, ms
	MS       float64 // the step's modelled time
	Decode   int     // sequences that drew a token
	Prefill  int     // prompt tokens computed
	Prefills int     // sequences whose prompt chunks ran
	Pairs    float64 // attention pairs the chunks computed (engine.ChunkPairs)
	KVUsage  float64
}

type chunk struct {
	s *seq
	n int
}

// device is one accelerator: a queue of prompts to prefill (first come first
// served) and a batch of sequences decoding, run one step at a time by a goroutine
// that exists only while there is work.
type device struct {
	e *Engine
	p *Profile

	mu sync.Mutex
	// admitting waits for KV blocks, in arrival order (admit.go); waiting holds
	// the admitted prefills not finished, in arrival order.
	admitting []*admission
	waiting   []*seq
	running   []*seq // decoding
	loop      bool   // a goroutine is running steps
	closed    bool
	now       float64 // modelled device time, ms
	// paced holds a sequence back until its reader took its last token, so that an
	// engine with no time to model goes no faster than its readers.
	paced bool
	// manual leaves the stepping to tests (stepOnce).
	manual bool
	kickc  chan struct{}

	// Reused by every step, to keep the step loop free of allocation.
	batch  []*seq
	chunks []chunk
}

func newDevice(e *Engine) *device {
	return &device{e: e, p: &e.cfg.Profile, paced: e.cfg.TimeScale == 0, kickc: make(chan struct{}, 1)}
}

// kick wakes the step loop if it waits for a reader.
func (d *device) kick() {
	select {
	case d.kickc <- struct{}{}:
	default:
	}
}

// startLocked makes sure a goroutine runs steps.
func (d *device) startLocked() {
	if !d.loop && !d.manual {
		d.loop = true
		go d.run()
	}
	d.kick()
}

// enqueue adds a prompt to prefill (or, decoding already, a sequence to the batch)
// and ends it when ctx does.
func (d *device) enqueue(ctx context.Context, s *seq) {
	stop := context.AfterFunc(ctx, func() { d.cancel(s, ctx.Err()) })
	d.mu.Lock()
	defer d.mu.Unlock()
	s.stop = stop
	s.enqueued = d.e.cfg.Clock.Now()
	if s.done { // an import whose first token ended it
		stop()
		return
	}
	if d.closed {
		s.end(engine.FinishCancelled, engine.ErrClosed)
		return
	}
	if s.blocks == nil {
		d.admitting = append(d.admitting, &admission{s: s})
		d.grantLocked()
		d.e.QueueChanged()
		return
	}
	if s.decoding {
		d.running = append(d.running, s)
	} else {
		d.waiting = append(d.waiting, s)
	}
	d.startLocked()
}

// cancel ends s early with err. One waiting for blocks leaves the queue, which
// may let the requests behind it in.
func (d *device) cancel(s *seq, err error) {
	d.mu.Lock()
	s.end(engine.FinishCancelled, err)
	d.grantLocked()
	d.mu.Unlock()
	d.kick()
}

// closeAll ends every sequence with ErrClosed.
func (d *device) closeAll() {
	d.mu.Lock()
	d.closed = true
	for _, a := range d.admitting {
		if a.s != nil {
			a.s.end(engine.FinishCancelled, engine.ErrClosed)
		}
	}
	d.admitting = nil // an import waiting sees the engine close and leaves
	for _, s := range d.waiting {
		s.end(engine.FinishCancelled, engine.ErrClosed)
	}
	for _, s := range d.running {
		s.end(engine.FinishCancelled, engine.ErrClosed)
	}
	d.mu.Unlock()
	d.kick()
}

// load is what Stats reports of the scheduler.
func (d *device) load() (running, waiting, tokens int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.running {
		if !s.done {
			running++
		}
	}
	for _, s := range d.waiting {
		if s.done {
			continue
		}
		if s.prefillDone > 0 {
			running++
		} else {
			waiting++
		}
		tokens += s.prefillLeft
	}
	w, t := d.admittingLoad()
	return running, waiting + w, tokens + t
}

// plan chooses the next step as vLLM's scheduler does: every running sequence
// decodes one token (up to MaxNumSeqs), each counting against the token budget;
// the rest of the budget goes to the prompts waiting, in order, chunked where a
// prompt does not fit. A prompt does not start while MaxNumSeqs are running.
func (d *device) plan() (Step, bool) {
	done := func(s *seq) bool { return s.done }
	d.running = slices.DeleteFunc(d.running, done)
	d.waiting = slices.DeleteFunc(d.waiting, done)
	d.batch, d.chunks = d.batch[:0], d.chunks[:0]
	budget, maxSeqs := d.p.MaxBatchedTokens, d.p.MaxNumSeqs
	for _, s := range d.running {
		if len(d.batch) >= maxSeqs || budget == 0 {
			break
		}
		if d.paced && s.read < len(s.buf) {
			continue
		}
		d.batch = append(d.batch, s)
		budget--
	}
	slots := len(d.running)
	var chunks, pairs float64
	prefill := 0
	for _, s := range d.waiting {
		if budget == 0 || (s.prefillDone == 0 && slots >= maxSeqs) {
			break
		}
		slots++
		n := min(s.prefillLeft, budget)
		o := s.blocks.cached*d.e.cfg.BlockSize + s.prefillDone
		chunks += d.p.ChunkMS(o, n)
		pairs += engine.ChunkPairs(o, n)
		d.chunks = append(d.chunks, chunk{s, n})
		budget -= n
		prefill += n
	}
	if len(d.batch) == 0 && len(d.chunks) == 0 {
		return Step{}, false
	}
	ps := d.e.pool.Stats()
	u := float64(ps.Active) / float64(ps.Total)
	return Step{At: d.now, MS: d.p.StepMS(len(d.batch), u, len(d.chunks) > 0, chunks),
		Decode: len(d.batch), Prefill: prefill, Prefills: len(d.chunks), Pairs: pairs, KVUsage: u}, true
}

// apply carries out a planned step that has taken its time: each decoding
// sequence draws a token, each chunk's tokens are computed, and a prompt whose last
// chunk ran draws its first token (or, prefilled for another worker, is ready).
func (d *device) apply(st Step, began time.Time) {
	d.now = st.At + st.MS
	for _, s := range d.batch {
		if !s.done {
			s.emit(d.e.token(s.hash, s.req.Sampling, s.produced))
		}
	}
	finished := false
	for _, c := range d.chunks {
		s := c.s
		if s.done {
			continue
		}
		if s.prefillDone == 0 {
			s.started = began
		}
		s.prefillLeft -= c.n
		s.prefillDone += c.n
		if s.prefillLeft > 0 {
			continue
		}
		finished = true
		d.e.storePrompt(s.blocks)
		if s.kind == kindPrefill {
			s.end(engine.FinishLength, nil)
			continue
		}
		s.decoding = true
		d.running = append(d.running, s)
		s.emit(d.e.token(s.hash, s.req.Sampling, 0))
	}
	if finished {
		d.waiting = slices.DeleteFunc(d.waiting, func(s *seq) bool { return s.done || s.prefillLeft == 0 })
	}
}

// run steps the device until it has nothing left to do.
func (d *device) run() {
	clock := d.e.cfg.Clock
	for {
		d.mu.Lock()
		st, ok := d.plan()
		if !ok {
			if len(d.running) == 0 && len(d.waiting) == 0 {
				d.loop = false
				d.mu.Unlock()
				return
			}
			d.mu.Unlock()
			// Every sequence waits for its reader (paced): wait for one.
			select {
			case <-d.kickc:
			case <-d.e.closing.Done():
			}
			continue
		}
		d.mu.Unlock()
		began := clock.Now()
		if dur := d.e.scaled(st.MS); dur > 0 {
			_ = clock.Sleep(d.e.closing, dur)
		}
		d.mu.Lock()
		d.apply(st, began)
		d.mu.Unlock()
		if d.e.cfg.OnStep != nil {
			d.e.cfg.OnStep(st)
		}
		if d.e.StepsObserved() && d.e.cfg.TimeScale > 0 {
			// The wall time the step took, oversleep included: what the
			// streams beside it saw.
			d.e.Step(engine.StepReport{Seconds: clock.Now().Sub(began).Seconds(), Decode: st.Decode,
				PrefillTokens: st.Prefill, PrefillPairs: st.Pairs, KVUsage: st.KVUsage})
		}
	}
}

// stepOnce plans and applies one step without waiting, for tests that step the
// device themselves in modelled time.
func (d *device) stepOnce() (Step, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st, ok := d.plan()
	if ok {
		d.apply(st, d.e.cfg.Clock.Now())
	}
	return st, ok
}

// queued counts the prompts waiting or prefilling; for tests, with the lock held.
func (d *device) queued() int { return len(d.waiting) }
