package engine

import "sync"

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
