package kvevents_test

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/engine/kvevents"
	"github.com/tandem-serve/tandem/internal/testutil/fakeengine"
)

func waitFor(t *testing.T, what string, cond func() bool, poke func()) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		if poke != nil {
			poke()
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func block(first uint32, hash uint64) fakeengine.StoredBlocks {
	toks := make([]uint32, 4)
	for i := range toks {
		toks[i] = first + uint32(i)
	}
	return fakeengine.StoredBlocks{Hashes: []uint64{hash}, TokenIDs: toks, BlockSize: 4}
}

// A gap is replayed from the replay socket when there is one, whether its
// answers carry the topic frame (llm-d's inference simulator) or not (vLLM);
// without, the mirror resynchronises (forgets what it held) and fills again.
func TestSubscriberGaps(t *testing.T) {
	for _, c := range []struct {
		name   string
		replay bool
		opts   fakeengine.PublisherOptions
	}{
		{"replay socket", true, fakeengine.PublisherOptions{}},
		{"replay socket with a topic frame", true, fakeengine.PublisherOptions{ReplayTopic: true}},
		{"no replay socket", false, fakeengine.PublisherOptions{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			pub := fakeengine.NewPublisherWith(t, "kv", fakeengine.MapEncoding, c.opts)
			m := kvevents.NewMirror(4, 64)
			var mu sync.Mutex
			frames := map[bool]int{}
			cfg := kvevents.SubscriberConfig{Endpoint: pub.Endpoint, Topic: "kv", OnFrames: func(replay bool, f [][]byte) {
				mu.Lock()
				frames[replay]++
				mu.Unlock()
			}}
			if c.replay {
				cfg.ReplayEndpoint = pub.ReplayEndpoint
			}
			sub, err := kvevents.Subscribe(cfg, m, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			waitFor(t, "the first block", func() bool { return m.Len() == 1 }, func() { pub.Stored(block(1, 10)) })
			pub.StoredLost(block(100, 20))
			waitFor(t, "the block after the gap", func() bool { return m.CachedPrefix([]uint32{300, 301, 302, 303, 0}) == 4 },
				func() { pub.Stored(block(300, 30)) })
			st := sub.Stats()
			if st.Gaps != 1 {
				t.Errorf("stats %+v, want one gap", st)
			}
			held := m.CachedPrefix([]uint32{1, 2, 3, 4, 0}) == 4
			lost := m.CachedPrefix([]uint32{100, 101, 102, 103, 0}) == 4
			if c.replay && (!held || !lost || st.Replayed < 1 || st.Resyncs[kvevents.ResyncGap] != 0) {
				t.Errorf("with replay: first block held %v, lost one replayed %v, stats %+v", held, lost, st)
			}
			if !c.replay && (held || lost || st.Resyncs[kvevents.ResyncGap] != 1) {
				t.Errorf("without replay: first block held %v, lost one %v, stats %+v; want a resync", held, lost, st)
			}
			// The capture hook saw every live message, and the replay's answers.
			mu.Lock()
			defer mu.Unlock()
			if frames[false] < st.Batches-st.Replayed || (c.replay && frames[true] < st.Replayed+1) {
				t.Errorf("OnFrames saw %d live and %d replayed messages; stats %+v", frames[false], frames[true], st)
			}
		})
	}
}

// An engine that restarts closes its sockets and binds them again: the
// subscription is lost, the mirror is cleared at once (before any new event:
// the router must not route by blocks the new engine does not hold), and the
// new publisher's events fill it again.
func TestSubscriberPublisherRestart(t *testing.T) {
	pub := fakeengine.NewPublisher(t, "kv", fakeengine.ArrayEncoding)
	m := kvevents.NewMirror(4, 64)
	sub, err := kvevents.Subscribe(kvevents.SubscriberConfig{Endpoint: pub.Endpoint, ReplayEndpoint: pub.ReplayEndpoint, Topic: "kv"},
		m, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	waitFor(t, "the first block", func() bool { return m.Len() == 1 }, func() { pub.Stored(block(1, 10)) })
	if err := pub.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the mirror cleared by the lost subscription", func() bool { return m.Len() == 0 }, nil)
	waitFor(t, "the restarted engine's block", func() bool { return m.CachedPrefix([]uint32{300, 301, 302, 303, 0}) == 4 },
		func() { pub.Stored(block(300, 30)) })
	if m.CachedPrefix([]uint32{1, 2, 3, 4, 0}) != 0 {
		t.Error("the block the engine held before its restart is still in the mirror")
	}
	if st := sub.Stats(); st.Resyncs[kvevents.ResyncDisconnected] < 1 {
		t.Errorf("stats %+v, want a resync for the lost subscription", st)
	}
}

func TestSubscriberConfig(t *testing.T) {
	for _, c := range []kvevents.SubscriberConfig{
		{Endpoint: "localhost:5557"},
		{ReplayEndpoint: "tcp://h:5558"},
		{Endpoint: "tcp://h:5557", ReplayEndpoint: "tcp://*:5558"},
	} {
		if c.Validate() == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if err := (kvevents.SubscriberConfig{Endpoint: "tcp://*:5557", ReplayEndpoint: "tcp://h:5558"}).Validate(); err != nil {
		t.Error(err)
	}
}
