// Package kvcache is a worker's KV cache bookkeeping: the paged block pool with its
// prefix cache, and the log of cache events the router's index is built from.
// Block identities come from package blockhash.
package kvcache

import "sync"

// EventKind is what happened to a set of cached blocks.
type EventKind int

const (
	Stored EventKind = iota + 1
	Removed
	Cleared
)

// Event is one change to a prefix cache. IDs increase by one per event, so a
// subscriber that sees a jump knows it missed something.
type Event struct {
	ID     uint64
	Kind   EventKind
	Parent uint64   // for Stored: the hash before Hashes[0], 0 at a prompt's start
	Hashes []uint64 // for Stored and Removed
}

// EventLog keeps the most recent events in a ring so that subscribers can catch up
// after a short stall; one that falls further behind must take a snapshot.
type EventLog struct {
	mu      sync.Mutex
	ring    []Event
	start   int    // index in ring of the oldest event
	n       int    // events held
	lastID  uint64 // id of the newest event; 0 before any
	changed chan struct{}
}

// NewEventLog keeps up to capacity events.
func NewEventLog(capacity int) *EventLog {
	if capacity < 1 {
		capacity = 1
	}
	return &EventLog{ring: make([]Event, capacity), changed: make(chan struct{})}
}

// Append records an event and wakes every waiter. It returns the event's id.
func (l *EventLog) Append(kind EventKind, parent uint64, hashes []uint64) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastID++
	ev := Event{ID: l.lastID, Kind: kind, Parent: parent, Hashes: hashes}
	if l.n < len(l.ring) {
		l.ring[(l.start+l.n)%len(l.ring)] = ev
		l.n++
	} else {
		l.ring[l.start] = ev
		l.start = (l.start + 1) % len(l.ring)
	}
	close(l.changed)
	l.changed = make(chan struct{})
	return ev.ID
}

// LastID is the id of the newest event, 0 if none.
func (l *EventLog) LastID() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastID
}

// Since returns the events after id, and a channel closed at the next append. ok is
// false when events after id have already left the ring: take a snapshot instead.
func (l *EventLog) Since(id uint64) (events []Event, changed <-chan struct{}, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if id > l.lastID {
		return nil, l.changed, false
	}
	missing := l.lastID - id
	if missing > uint64(l.n) {
		return nil, l.changed, false
	}
	events = make([]Event, 0, missing)
	for i := l.n - int(missing); i < l.n; i++ {
		events = append(events, l.ring[(l.start+i)%len(l.ring)])
	}
	return events, l.changed, true
}
