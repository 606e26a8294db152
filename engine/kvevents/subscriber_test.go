package kvevents_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/engine/kvevents"
	"github.com/tandem-serve/tandem/internal/fakeengine"
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

// A gap is replayed from the replay socket when there is one; without, the
// mirror resynchronises (forgets what it held) and fills again.
func TestSubscriberGaps(t *testing.T) {
	for _, replay := range []bool{true, false} {
		name := "no replay socket"
		if replay {
			name = "replay socket"
		}
		t.Run(name, func(t *testing.T) {
			pub := fakeengine.NewPublisher(t, "kv", fakeengine.MapEncoding)
			m := kvevents.NewMirror(4, 64)
			cfg := kvevents.SubscriberConfig{Endpoint: pub.Endpoint, Topic: "kv"}
			if replay {
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
			if replay && (!held || !lost || st.Replayed < 1 || st.Resyncs != 0) {
				t.Errorf("with replay: first block held %v, lost one replayed %v, stats %+v", held, lost, st)
			}
			if !replay && (held || lost || st.Resyncs != 1) {
				t.Errorf("without replay: first block held %v, lost one %v, stats %+v; want a resync", held, lost, st)
			}
		})
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
