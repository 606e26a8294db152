package integration

import (
	"testing"
	"time"

	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/internal/testutil/fakeengine"
	"github.com/tandem-serve/tandem/tokenizer"
)

// eventsWorker starts an aggregated tandem worker in front of a fake vLLM that
// publishes its KV events on pub; replay says whether the worker is told the
// replay socket.
func eventsWorker(t *testing.T, id string, pub *fakeengine.Publisher, replay bool) string {
	t.Helper()
	f := (&fakeengine.Server{Kind: fakeengine.VLLM, TokenIDs: true}).Start(t)
	args := []string{"--mode", "aggregated", "--kv-events-endpoint", pub.Endpoint, "--kv-events-topic", "kv-events"}
	if replay {
		args = append(args, "--kv-events-replay-endpoint", pub.ReplayEndpoint)
	}
	return gpuWorker(t, "decode", id, f, args...)
}

// blocksOf is the first n full blocks of text's tokens as `tandem route` (and the
// frontend) hashes them, with the workers' tokenizer, and engine hashes of our
// choosing.
func blocksOf(t *testing.T, text string, n int, firstHash uint64) fakeengine.StoredBlocks {
	t.Helper()
	f, err := gguf.Open(gpuTokenizer)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode(text)
	if len(ids) < n*16+1 {
		t.Fatalf("%q is %d tokens, want more than %d", text, len(ids), n*16)
	}
	ev := fakeengine.StoredBlocks{TokenIDs: ids[:n*16], BlockSize: 16}
	for i := range n {
		ev.Hashes = append(ev.Hashes, firstHash+uint64(i))
	}
	return ev
}

// untilRouted publishes ev (again, while the subscriber may not be connected
// yet: a PUB socket drops what no one hears) until the router sends text to
// want with at least blocks cached there.
func untilRouted(t *testing.T, rtr, text, want string, blocks int, publish func()) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		publish()
		w, n := routeTo(t, rtr, text)
		if w == want && n >= blocks {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the router sends %q to %s with %d blocks cached, want %s with %d", text[:20], w, n, want, blocks)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

const (
	promptA = "Once upon a time there was a little fox who lived at the edge of a great forest, and every morning it walked to the river " +
		"to watch the fish jump in the cold clear water while the birds sang in the tall trees above"
	promptB = "In a small town by the sea, an old sailor kept a lighthouse that had not been lit for many years, until one stormy night " +
		"a ship lost its way and the sailor climbed the stairs with a lantern in his hand"
	promptC = "The robot woke up in an empty factory and could not remember how it got there, so it began to walk through the long " +
		"quiet halls looking for any sign of the people who had built it so long ago"
)

// vLLM's KV events, in the older array encoding and the newer map encoding,
// move the router's choice to the worker whose engine holds the prompt's prefix;
// a removal moves it back.
func TestGPUKVEventsMoveRouting(t *testing.T) {
	pa := fakeengine.NewPublisher(t, "kv-events", fakeengine.ArrayEncoding)
	pb := fakeengine.NewPublisher(t, "kv-events", fakeengine.MapEncoding)
	a := eventsWorker(t, "agg-a", pa, true)
	b := eventsWorker(t, "agg-b", pb, true)
	rtr := startService(t, "router", "--listen", "127.0.0.1:0", "--decode-workers", a+","+b)
	waitHealthy(t, rtr)

	evA := blocksOf(t, promptA, 2, 1000)
	untilRouted(t, rtr, promptA, "agg-b", 2, func() { pb.Stored(evA) })
	evB := blocksOf(t, promptB, 2, 5000)
	untilRouted(t, rtr, promptB, "agg-a", 2, func() { pa.Stored(evB) })

	// Removed by the engine's own hashes: the blocks leave the router's index.
	pb.Removed(evA.Hashes)
	deadline := time.Now().Add(15 * time.Second)
	for _, n := routeTo(t, rtr, promptA); n != 0; _, n = routeTo(t, rtr, promptA) {
		if time.Now().After(deadline) {
			t.Fatalf("%d blocks of the removed prefix still cached", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A dropped sequence number that cannot be replayed resynchronises the worker's
// view of its engine's cache: what it knew is cleared (the router's index with
// it), and the events after the gap fill it again.
func TestGPUKVEventsGapResyncs(t *testing.T) {
	pub := fakeengine.NewPublisher(t, "kv-events", fakeengine.MapEncoding)
	w := eventsWorker(t, "agg-r", pub, false)
	rtr := startService(t, "router", "--listen", "127.0.0.1:0", "--decode-workers", w)
	waitHealthy(t, rtr)

	evA := blocksOf(t, promptA, 2, 100)
	untilRouted(t, rtr, promptA, "agg-r", 2, func() { pub.Stored(evA) })
	pub.StoredLost(blocksOf(t, promptB, 2, 200)) // never sent: a gap
	evC := blocksOf(t, promptC, 2, 300)
	untilRouted(t, rtr, promptC, "agg-r", 2, func() { pub.Stored(evC) })
	if _, n := routeTo(t, rtr, promptA); n != 0 {
		t.Errorf("after the gap, %d blocks of the prefix stored before it are still cached; want them cleared", n)
	}
	// The operator sees it: one gap, one resync, batches applied live.
	for sample, want := range map[string]float64{"tandem_kv_events_gaps_total": 1, "tandem_kv_events_resyncs_total": 1,
		`tandem_kv_events_batches_total{source="live"}`: 2} {
		if v, ok := metricValue(w, sample); !ok || v < want {
			t.Errorf("%s = %v (found %v), want at least %v", sample, v, ok, want)
		}
	}

	// With the replay socket, the same gap is replayed instead: nothing is lost.
	pub2 := fakeengine.NewPublisher(t, "kv-events", fakeengine.ArrayEncoding)
	w2 := eventsWorker(t, "agg-p", pub2, true)
	rtr2 := startService(t, "router", "--listen", "127.0.0.1:0", "--decode-workers", w2)
	waitHealthy(t, rtr2)
	untilRouted(t, rtr2, promptA, "agg-p", 2, func() { pub2.Stored(evA) })
	pub2.StoredLost(blocksOf(t, promptB, 2, 200))
	untilRouted(t, rtr2, promptC, "agg-p", 2, func() { pub2.Stored(evC) })
	for _, c := range []struct {
		text   string
		blocks int
	}{{promptA, 2}, {promptB, 2}} {
		if _, n := routeTo(t, rtr2, c.text); n != c.blocks {
			t.Errorf("with replay, %d blocks of %q cached, want %d", n, c.text[:20], c.blocks)
		}
	}
	if v, _ := metricValue(w2, "tandem_kv_events_resyncs_total"); v != 0 {
		t.Errorf("with replay, %v resyncs counted, want 0", v)
	}
	if v, ok := metricValue(w2, `tandem_kv_events_batches_total{source="replayed"}`); !ok || v < 1 {
		t.Errorf("with replay, %v batches counted as replayed (found %v), want at least 1", v, ok)
	}
}

// An engine that restarts (its publisher closes and binds the same ports again,
// numbering from 0, its cache empty) holds nothing it held before: the router
// stops crediting those blocks as soon as the worker loses the subscription,
// before the new engine publishes anything, and credits what it stores next.
// A restart the worker's connection did not notice shows as the sequence
// starting over, and clears the view too.
func TestGPUKVEventsEngineRestart(t *testing.T) {
	pub := fakeengine.NewPublisher(t, "kv-events", fakeengine.ArrayEncoding)
	w := eventsWorker(t, "agg-x", pub, true)
	rtr := startService(t, "router", "--listen", "127.0.0.1:0", "--decode-workers", w)
	waitHealthy(t, rtr)

	evA := blocksOf(t, promptA, 2, 100)
	untilRouted(t, rtr, promptA, "agg-x", 2, func() { pub.Stored(evA) })
	if err := pub.Restart(); err != nil {
		t.Fatal(err)
	}
	untilUncached(t, rtr, promptA, "after the engine's publisher closed")
	evC := blocksOf(t, promptC, 2, 100) // a new engine may reuse the old one's hashes
	untilRouted(t, rtr, promptC, "agg-x", 2, func() { pub.Stored(evC) })
	if _, n := routeTo(t, rtr, promptA); n != 0 {
		t.Errorf("after the restart, %d blocks the old engine held are credited", n)
	}
	if v, ok := metricValue(w, `tandem_kv_events_resyncs_total{reason="disconnected"}`); !ok || v < 1 {
		t.Errorf(`tandem_kv_events_resyncs_total{reason="disconnected"} = %v (found %v), want at least 1`, v, ok)
	}

	pub.RestartSequence()
	evB := blocksOf(t, promptB, 2, 300)
	untilRouted(t, rtr, promptB, "agg-x", 2, func() { pub.Stored(evB) })
	untilUncached(t, rtr, promptC, "after the sequence started over")
	if v, ok := metricValue(w, `tandem_kv_events_resyncs_total{reason="restart"}`); !ok || v < 1 {
		t.Errorf(`tandem_kv_events_resyncs_total{reason="restart"} = %v (found %v), want at least 1`, v, ok)
	}
}

// untilUncached waits until the router credits no block of text.
func untilUncached(t *testing.T, rtr, text, when string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for _, n := routeTo(t, rtr, text); n != 0; _, n = routeTo(t, rtr, text) {
		if time.Now().After(deadline) {
			t.Fatalf("%s, the router still credits %d blocks of %q", when, n, text[:20])
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A publisher modelled on llm-d's inference simulator: in the array encoding a
// chain's first parent is 0 rather than nil, and the replay socket answers with
// the topic frame before the sequence. Both chains are keyed, the gap is
// replayed, and what cannot be keyed is counted by reason.
func TestGPUKVEventsSimulatorPublisher(t *testing.T) {
	pub := fakeengine.NewPublisherWith(t, "kv-events", fakeengine.ArrayEncoding,
		fakeengine.PublisherOptions{ReplayTopic: true, ZeroParent: true})
	w := eventsWorker(t, "agg-s", pub, true)
	rtr := startService(t, "router", "--listen", "127.0.0.1:0", "--decode-workers", w)
	waitHealthy(t, rtr)

	// Two events: the first block with parent 0, the second chained to it.
	evA := blocksOf(t, promptA, 2, 100)
	first := fakeengine.StoredBlocks{Hashes: evA.Hashes[:1], TokenIDs: evA.TokenIDs[:16], BlockSize: 16}
	second := fakeengine.StoredBlocks{Hashes: evA.Hashes[1:], Parent: &evA.Hashes[0], TokenIDs: evA.TokenIDs[16:], BlockSize: 16}
	untilRouted(t, rtr, promptA, "agg-s", 2, func() { pub.Stored(first); pub.Stored(second) })

	pub.StoredLost(blocksOf(t, promptB, 2, 200))
	pub.Stored(fakeengine.StoredBlocks{Hashes: []uint64{900}, TokenIDs: evA.TokenIDs[:16], BlockSize: 32}) // not the worker's block size
	evC := blocksOf(t, promptC, 2, 300)
	untilRouted(t, rtr, promptC, "agg-s", 2, func() { pub.Stored(evC) })
	for _, text := range []string{promptA, promptB} {
		if _, n := routeTo(t, rtr, text); n != 2 {
			t.Errorf("%d blocks of %q credited, want 2 (replayed with a topic frame)", n, text[:20])
		}
	}
	for sample, want := range map[string]float64{
		`tandem_kv_events_batches_total{source="replayed"}`:   1,
		`tandem_kv_events_skipped_total{reason="block_size"}`: 1,
		`tandem_kv_cache_blocks{state="cached"}`:              6,
	} {
		if v, ok := metricValue(w, sample); !ok || v < want {
			t.Errorf("%s = %v (found %v), want at least %v", sample, v, ok, want)
		}
	}
	for _, sample := range []string{"tandem_kv_events_resyncs_total", `tandem_kv_events_skipped_total{reason="unknown_parent"}`} {
		if v, _ := metricValue(w, sample); v != 0 {
			t.Errorf("%s = %v, want 0", sample, v)
		}
	}
}
