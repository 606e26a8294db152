package engine

import (
	"sync"
	"sync/atomic"
)

// LoadNotifier is implemented by engines that can say when their queue changed
// in a way no KV event shows: a prompt accepted and waiting. A worker reports its
// load at that moment, so the router's view of a prefill worker's queue is not a
// heartbeat old; with several decode workers sending to one prefill worker, a
// stale view let each of them join a queue the others had just filled.
type LoadNotifier interface {
	// LoadChanged is closed at the next such change.
	LoadChanged() <-chan struct{}
}

// Broadcast wakes every waiter once per Fire. The zero value is ready; Fire with
// no one waiting costs a lock.
type Broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

// Wait returns a channel closed at the next Fire.
func (b *Broadcast) Wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// Fire wakes everyone waiting.
func (b *Broadcast) Fire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}

// Hooks implements LoadNotifier and StepReporter for an engine that embeds it
// (sim, native): the engine calls QueueChanged when a prompt joins its queue
// and Step after each step it runs.
type Hooks struct {
	queue Broadcast
	steps atomic.Pointer[func(StepReport)]
}

// LoadChanged is closed when a prompt next joins the queue.
func (h *Hooks) LoadChanged() <-chan struct{} { return h.queue.Wait() }

// ObserveSteps has f told of every step reported.
func (h *Hooks) ObserveSteps(f func(StepReport)) { h.steps.Store(&f) }

// QueueChanged wakes LoadChanged's waiters.
func (h *Hooks) QueueChanged() { h.queue.Fire() }

// StepsObserved says whether a step report has anyone to go to, so an engine
// builds none for no one.
func (h *Hooks) StepsObserved() bool { return h.steps.Load() != nil }

// Step hands r to the observer, if any.
func (h *Hooks) Step(r StepReport) {
	if f := h.steps.Load(); f != nil {
		(*f)(r)
	}
}
