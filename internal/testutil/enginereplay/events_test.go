package enginereplay_test

import (
	"encoding/binary"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tandem-serve/tandem/engine/kvevents"
	"github.com/tandem-serve/tandem/internal/testutil/enginereplay"
)

// The KV event messages a worker recorded from llm-d's simulator decode as the
// worker's subscriber reads them: live ones as (topic, sequence, batch), replayed
// ones with the topic frame too, the replay ending at sequence -1; every stored
// block of the configured 16 tokens. Applied in sequence, they tell the worker
// (and so the router) that the long prompt's two full blocks are cached.
func TestCapturedKVEvents(t *testing.T) {
	xs, err := enginereplay.Load(filepath.Join("testdata", "llm-d-sim", "decode-worker.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	live, replayed, ends, stored := 0, 0, 0, 0
	batches := map[int64]kvevents.Batch{}
	for _, x := range xs {
		if x.ZMQ == nil {
			continue
		}
		f := x.ZMQ.Frames
		for len(f) > 0 && len(f[0]) == 0 {
			f = f[1:] // the delimiter, and the end marker's empty topic
		}
		if len(f) == 3 {
			if string(f[0]) != "kv@127.0.0.1:18400@stories260K" {
				t.Errorf("seq %d: topic %q", x.Seq, f[0])
			}
			f = f[1:]
		}
		if len(f) != 2 || len(f[0]) != 8 {
			t.Fatalf("seq %d: frames %q", x.Seq, x.ZMQ.Frames)
		}
		if int64(binary.BigEndian.Uint64(f[0])) == -1 {
			ends++
			continue
		}
		b, err := kvevents.DecodeBatch(f[1])
		if err != nil {
			t.Fatalf("seq %d: %v", x.Seq, err)
		}
		batches[int64(binary.BigEndian.Uint64(f[0]))] = b
		for _, ev := range b.Events {
			if ev.Kind == kvevents.BlockStored {
				stored++
				if ev.BlockSize != 16 || len(ev.TokenIDs) != 16*len(ev.BlockHashes) {
					t.Errorf("seq %d: %d blocks of %d tokens, %d token ids", x.Seq, len(ev.BlockHashes), ev.BlockSize, len(ev.TokenIDs))
				}
			}
		}
		if x.ZMQ.Replay {
			replayed++
		} else {
			live++
		}
	}
	if live == 0 || replayed == 0 || ends != 1 || stored == 0 {
		t.Errorf("%d live, %d replayed, %d replay ends, %d BlockStored events", live, replayed, ends, stored)
	}
	m := kvevents.NewMirror(16, 4096)
	for _, seq := range slices.Sorted(maps.Keys(batches)) {
		m.Apply(batches[seq])
	}
	calls, err := enginereplay.Calls(xs)
	if err != nil {
		t.Fatal(err)
	}
	longest := calls[0].Req.Prompt
	for _, c := range calls {
		if len(c.Req.Prompt) > len(longest) {
			longest = c.Req.Prompt
		}
	}
	if full := len(longest) / 16 * 16; full < 32 || m.CachedPrefix(longest) != full {
		t.Errorf("the %d-token prompt: %d tokens cached as the events say, want %d", len(longest), m.CachedPrefix(longest), full)
	}
}
