package kvevents

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"strings"
	"testing"

	"github.com/go-zeromq/zmq4"
)

// message is a live (topic, sequence, batch) message holding events.
func message(t *testing.T, seq int64, events ...Event) [][]byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(seq))
	return [][]byte{[]byte("kv"), b[:], encodeBatch(t, true, false, events...)}
}

// A sequence number that goes back, or comes again, is a new publisher (a
// restarted engine): the mirror is cleared, not left with the old engine's
// blocks while the same number is dropped as a duplicate.
func TestSubscriberSequenceRestart(t *testing.T) {
	const bs = 4
	m := NewMirror(bs, 64)
	s := newSubscriber(SubscriberConfig{Endpoint: "tcp://127.0.0.1:1"}, m, slog.New(slog.DiscardHandler))
	defer s.cancel()
	held := func(from uint32) bool { return m.CachedPrefix(append(tokens(bs, from), 0)) == bs }

	s.handle(message(t, 0, stored(nil, []uint64{1}, tokens(bs, 10), bs)))
	s.handle(message(t, 1, stored(nil, []uint64{2}, tokens(bs, 20), bs)))
	if !held(10) || !held(20) {
		t.Fatal("the first two batches were not applied")
	}
	// Sequence 1 again: a publisher that started over (llm-d's inference
	// simulator numbers from 1) after publishing once.
	s.handle(message(t, 1, stored(nil, []uint64{3}, tokens(bs, 30), bs)))
	if held(10) || held(20) || !held(30) {
		t.Errorf("after the sequence came again: old blocks held %v %v, new one %v; want only the new one", held(10), held(20), held(30))
	}
	// A sequence that goes back to 0.
	s.handle(message(t, 2, stored(nil, []uint64{4}, tokens(bs, 40), bs)))
	s.handle(message(t, 0, stored(nil, []uint64{5}, tokens(bs, 50), bs)))
	if held(30) || held(40) || !held(50) {
		t.Errorf("after the sequence went back: old blocks held %v %v, new one %v", held(30), held(40), held(50))
	}
	if st := s.Stats(); st.Resyncs[ResyncRestart] != 2 || st.Batches != 5 {
		t.Errorf("stats %+v, want 2 restarts and 5 batches applied", st)
	}
}

// Skipped events are counted by reason, and the first of each reason is
// logged at Warn with it.
func TestSubscriberLogsFirstSkip(t *testing.T) {
	var buf bytes.Buffer
	m := NewMirror(4, 64)
	s := newSubscriber(SubscriberConfig{Endpoint: "tcp://127.0.0.1:1"}, m, slog.New(slog.NewTextHandler(&buf, nil)))
	defer s.cancel()
	for seq := range int64(3) {
		s.handle(message(t, seq, stored(nil, []uint64{uint64(seq)}, tokens(16, 1), 16), stored(ptr(99), []uint64{7}, tokens(4, 1), 4)))
	}
	if st := m.Stats(); st.Skipped[SkipBlockSize] != 3 || st.Skipped[SkipUnknownParent] != 3 {
		t.Errorf("skipped %v, want 3 block_size and 3 unknown_parent", st.Skipped)
	}
	out := buf.String()
	for _, reason := range []string{SkipBlockSize, SkipUnknownParent} {
		if n := strings.Count(out, "reason="+reason); n != 1 {
			t.Errorf("%d log lines with reason=%s, want 1:\n%s", n, reason, out)
		}
	}
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "block_size 16, the worker's is 4") {
		t.Errorf("the skip is not logged at Warn with what the event said:\n%s", out)
	}
}

// Replay answers are read in vLLM's form and with the topic frame first.
func TestReplayedFrames(t *testing.T) {
	seq := func(v int64) []byte {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(v))
		return b[:]
	}
	for _, c := range []struct {
		name   string
		frames [][]byte
		seq    int64
	}{
		{"vLLM", [][]byte{{}, seq(5), []byte("p")}, 5},
		{"vLLM without the delimiter", [][]byte{seq(5), []byte("p")}, 5},
		{"vLLM end marker", [][]byte{{}, seq(-1), {}}, -1},
		{"topic frame", [][]byte{{}, []byte("kv-events"), seq(6), []byte("p")}, 6},
		{"topic frame, empty topic", [][]byte{{}, {}, seq(6), []byte("p")}, 6},
		{"topic frame end marker", [][]byte{{}, {}, seq(-1), {}}, -1},
	} {
		got, _, err := replayed(c.frames)
		if err != nil || got != c.seq {
			t.Errorf("%s: sequence %d, error %v; want %d", c.name, got, err, c.seq)
		}
	}
	if _, _, err := replayed([][]byte{{}, []byte("kv"), []byte("short"), []byte("p")}); err == nil ||
		!strings.Contains(err.Error(), "4 frames") {
		t.Errorf("a 5-byte sequence: error %v, want one naming the frames", err)
	}
}

// A replay that fails part way leaves out the batches after the failure, their
// removals with them: what it applied is dropped (a resync), even on the first
// message, rather than kept as a view that may hold more than the engine does.
func TestSubscriberReplayFailsPartWay(t *testing.T) {
	const bs = 4
	router := zmq4.NewRouter(context.Background())
	defer router.Close()
	if err := router.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			req, err := router.Recv()
			if err != nil {
				return
			}
			id := req.Frames[0]
			first := message(t, 0, stored(nil, []uint64{1}, tokens(bs, 10), bs))
			_ = router.SendMulti(zmq4.NewMsgFrom(id, []byte{}, first[1], first[2]))
			_ = router.SendMulti(zmq4.NewMsgFrom(id, []byte{}, []byte("not a sequence")))
		}
	}()
	m := NewMirror(bs, 64)
	s := newSubscriber(SubscriberConfig{Endpoint: "tcp://127.0.0.1:1", ReplayEndpoint: "tcp://" + router.Addr().String()}, m,
		slog.New(slog.DiscardHandler))
	defer s.cancel()
	s.handle(message(t, 2, stored(nil, []uint64{3}, tokens(bs, 30), bs)))
	held := func(from uint32) bool { return m.CachedPrefix(append(tokens(bs, from), 0)) == bs }
	if held(10) || !held(30) {
		t.Errorf("after a replay that failed part way: replayed block held %v, live one %v; want only the live one", held(10), held(30))
	}
	if st := s.Stats(); st.Replayed != 1 || st.Resyncs[ResyncGap] != 1 {
		t.Errorf("stats %+v, want 1 batch replayed and then a resync", st)
	}
}
