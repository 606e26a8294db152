package kvcache_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/kvcache"
)

func ids(evs []kvcache.Event) []uint64 {
	out := make([]uint64, 0, len(evs))
	for _, e := range evs {
		out = append(out, e.ID)
	}
	return out
}

func TestEventLogIDsAndSince(t *testing.T) {
	l := kvcache.NewEventLog(8)
	if l.LastID() != 0 {
		t.Fatalf("empty log at id %d", l.LastID())
	}
	if evs, _, ok := l.Since(0); !ok || len(evs) != 0 {
		t.Fatalf("Since(0) on an empty log: %v, %v", evs, ok)
	}
	for i := uint64(1); i <= 5; i++ {
		if id := l.Append(kvcache.Stored, i*10, []uint64{i}); id != i {
			t.Fatalf("event %d got id %d", i, id)
		}
	}
	if l.LastID() != 5 {
		t.Fatalf("LastID %d, want 5", l.LastID())
	}
	for after := uint64(0); after <= 5; after++ {
		evs, _, ok := l.Since(after)
		want := []uint64{}
		for i := after + 1; i <= 5; i++ {
			want = append(want, i)
		}
		if !ok || !slices.Equal(ids(evs), want) {
			t.Errorf("Since(%d) = %v ok=%v, want %v", after, ids(evs), ok, want)
		}
	}
	evs, _, _ := l.Since(3)
	if evs[0].Kind != kvcache.Stored || evs[0].Parent != 40 || !slices.Equal(evs[0].Hashes, []uint64{4}) {
		t.Errorf("event 4 is %+v", evs[0])
	}
	// An id the log never issued cannot be continued from.
	if _, _, ok := l.Since(6); ok {
		t.Error("Since(6) ok on a log at 5")
	}
}

func TestEventLogWrap(t *testing.T) {
	l := kvcache.NewEventLog(4)
	for range 10 {
		l.Append(kvcache.Removed, 0, []uint64{1})
	}
	// The ring holds 7..10: a subscriber at 6 is exactly caught up on the oldest.
	evs, _, ok := l.Since(6)
	if !ok || !slices.Equal(ids(evs), []uint64{7, 8, 9, 10}) {
		t.Errorf("Since(6) = %v ok=%v, want [7 8 9 10]", ids(evs), ok)
	}
	for _, after := range []uint64{0, 1, 5} {
		if evs, _, ok := l.Since(after); ok {
			t.Errorf("Since(%d) = %v ok=true after the ring wrapped past it", after, ids(evs))
		}
	}
	if evs, _, ok := l.Since(9); !ok || !slices.Equal(ids(evs), []uint64{10}) {
		t.Errorf("Since(9) = %v ok=%v", ids(evs), ok)
	}
	if evs, _, ok := l.Since(10); !ok || len(evs) != 0 {
		t.Errorf("Since(10) = %v ok=%v, want none", ids(evs), ok)
	}
	// Capacity below one still keeps the newest event.
	one := kvcache.NewEventLog(0)
	one.Append(kvcache.Cleared, 0, nil)
	one.Append(kvcache.Cleared, 0, nil)
	if evs, _, ok := one.Since(1); !ok || !slices.Equal(ids(evs), []uint64{2}) {
		t.Errorf("capacity 0 log: Since(1) = %v ok=%v", ids(evs), ok)
	}
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestEventLogChanged(t *testing.T) {
	l := kvcache.NewEventLog(4)
	_, c1, _ := l.Since(0)
	_, c1b, _ := l.Since(0)
	if closed(c1) {
		t.Fatal("changed closed before any append")
	}
	l.Append(kvcache.Stored, 0, []uint64{1})
	if !closed(c1) || !closed(c1b) {
		t.Fatal("changed not closed by Append, for every waiter")
	}
	_, c2, _ := l.Since(1)
	if closed(c2) {
		t.Fatal("the channel after an append is already closed")
	}
	// A waiter blocked on changed wakes on the next append, from another goroutine.
	var wg sync.WaitGroup
	woke := make(chan []uint64, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-c2
		evs, _, _ := l.Since(1)
		woke <- ids(evs)
	}()
	l.Append(kvcache.Removed, 0, []uint64{1})
	select {
	case got := <-woke:
		if !slices.Equal(got, []uint64{2}) {
			t.Errorf("woken waiter saw %v, want [2]", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter never woke")
	}
	wg.Wait()
}

func TestEventLogConcurrent(t *testing.T) {
	l := kvcache.NewEventLog(1 << 12)
	const writers, each = 4, 200
	var wg sync.WaitGroup
	got := make(chan uint64, writers*each)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				got <- l.Append(kvcache.Stored, 0, nil)
			}
		}()
	}
	wg.Wait()
	close(got)
	var all []uint64
	for id := range got {
		all = append(all, id)
	}
	slices.Sort(all)
	for i, id := range all {
		if id != uint64(i+1) {
			t.Fatalf("ids from concurrent appends are not 1..%d without gaps: %v...", writers*each, all[:i+1])
		}
	}
	evs, _, ok := l.Since(0)
	if !ok || len(evs) != writers*each {
		t.Fatalf("Since(0) returned %d events ok=%v", len(evs), ok)
	}
	for i, e := range evs {
		if e.ID != uint64(i+1) {
			t.Fatalf("event %d has id %d: the log is out of order", i, e.ID)
		}
	}
}
