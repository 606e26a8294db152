package kvevents

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tandem-serve/tandem/kvcache"
	"github.com/tandem-serve/tandem/kvcache/blockhash"
)

// encodeBatch writes a batch as vLLM's msgspec structs do: arrays (array_like)
// or tagged maps; with bytesHashes, hashes as 32 bytes whose last 8 are the key.
func encodeBatch(t testing.TB, maps, bytesHashes bool, events ...Event) []byte {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	hash := func(h uint64) {
		if bytesHashes {
			b := make([]byte, 32)
			binary.BigEndian.PutUint64(b[24:], h)
			must(e.EncodeBytes(b))
			return
		}
		must(e.EncodeUint64(h))
	}
	open := func(n int) {
		if maps {
			must(e.EncodeMapLen(n))
		} else {
			must(e.EncodeArrayLen(n))
		}
	}
	key := func(k string) {
		if maps {
			must(e.EncodeString(k))
		}
	}
	open(3)
	key("ts")
	must(e.EncodeFloat64(1.5))
	key("events")
	must(e.EncodeArrayLen(len(events)))
	for _, ev := range events {
		switch ev.Kind {
		case BlockStored:
			open(7)
			key("type")
			must(e.EncodeString("BlockStored"))
			key("block_hashes")
			must(e.EncodeArrayLen(len(ev.BlockHashes)))
			for _, h := range ev.BlockHashes {
				hash(h)
			}
			key("parent_block_hash")
			if ev.HasParent {
				hash(ev.Parent)
			} else {
				must(e.EncodeNil())
			}
			key("token_ids")
			must(e.EncodeArrayLen(len(ev.TokenIDs)))
			for _, id := range ev.TokenIDs {
				must(e.EncodeUint64(uint64(id)))
			}
			key("block_size")
			must(e.EncodeInt(int64(ev.BlockSize)))
			key("lora_id")
			if ev.LoRA {
				must(e.EncodeInt(3))
			} else {
				must(e.EncodeNil())
			}
			key("medium")
			must(e.EncodeString(ev.Medium))
		case BlockRemoved:
			open(3)
			key("type")
			must(e.EncodeString("BlockRemoved"))
			key("block_hashes")
			must(e.EncodeArrayLen(len(ev.BlockHashes)))
			for _, h := range ev.BlockHashes {
				hash(h)
			}
			key("medium")
			must(e.EncodeString(ev.Medium))
		case AllBlocksCleared:
			open(1)
			key("type")
			must(e.EncodeString("AllBlocksCleared"))
		}
	}
	key("data_parallel_rank")
	must(e.EncodeInt(2))
	return buf.Bytes()
}

func tokens(n int, from uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = from + uint32(i)
	}
	return out
}

func TestDecodeBothEncodings(t *testing.T) {
	events := []Event{
		{Kind: BlockStored, BlockHashes: []uint64{1 << 63, 7}, TokenIDs: tokens(8, 100), BlockSize: 4, Medium: "GPU"},
		{Kind: BlockStored, BlockHashes: []uint64{9}, Parent: 7, HasParent: true, TokenIDs: tokens(4, 200), BlockSize: 4, Medium: "GPU"},
		{Kind: BlockRemoved, BlockHashes: []uint64{9}, Medium: "GPU"},
		{Kind: AllBlocksCleared},
	}
	for _, c := range []struct {
		name              string
		maps, bytesHashes bool
	}{{"array", false, false}, {"map", true, false}, {"map with byte hashes", true, true}, {"array with byte hashes", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			b, err := DecodeBatch(encodeBatch(t, c.maps, c.bytesHashes, events...))
			if err != nil {
				t.Fatal(err)
			}
			if b.TS != 1.5 || b.DPRank != 2 || !reflect.DeepEqual(b.Events, events) {
				t.Errorf("decoded %+v\nwant %+v", b, events)
			}
		})
	}
}

func TestDecodeRejects(t *testing.T) {
	good := encodeBatch(t, true, false, Event{Kind: AllBlocksCleared})
	for name, p := range map[string][]byte{
		"empty":             nil,
		"a string":          {0xa3, 'a', 'b', 'c'},
		"truncated":         good[:len(good)-1],
		"trailing bytes":    append(append([]byte{}, good...), 0x00),
		"forged array size": {0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 0xff, 0xff, 0xff, 0xff},
		"deep nesting":      append(bytes.Repeat([]byte{0x91}, 100), 0xc0),
	} {
		if _, err := DecodeBatch(p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func stored(parent *uint64, hashes []uint64, toks []uint32, bs int) Event {
	ev := Event{Kind: BlockStored, BlockHashes: hashes, TokenIDs: toks, BlockSize: bs}
	if parent != nil {
		ev.Parent, ev.HasParent = *parent, true
	}
	return ev
}

// The mirror keys blocks by tandem's hash of their tokens, whatever the engine
// hashes with, and finds them by the engine's hash again on removal.
func TestMirror(t *testing.T) {
	const bs = 4
	prompt := tokens(13, 1) // 3 full blocks and a last token
	want := blockhash.Hash(prompt, bs)
	m := NewMirror(bs, 64)
	seven := uint64(0xe7)
	skips := m.Apply(Batch{Events: []Event{
		stored(nil, []uint64{0xe6, 0xe7}, prompt[:8], bs),
		stored(&seven, []uint64{0xe8}, prompt[8:12], bs),
		stored(nil, []uint64{0xf0}, tokens(4, 500), 8),                                                        // another block size
		{Kind: BlockStored, BlockHashes: []uint64{0xf1}, TokenIDs: tokens(4, 600), BlockSize: bs, LoRA: true}, // an adapter's
		stored(ptr(0xdead), []uint64{0xf2}, tokens(4, 700), bs),                                               // parent never seen
		stored(nil, []uint64{0xf3}, tokens(5, 800), bs),                                                       // 5 tokens for a block of 4
		{Kind: BlockStored, BlockHashes: []uint64{0xf4}, TokenIDs: tokens(4, 900), BlockSize: bs, Medium: "CPU"},
		{Kind: BlockRemoved, BlockHashes: []uint64{0xf4}, Medium: "CPU"},
		stored(nil, nil, nil, bs), // no blocks
	}})
	if got := m.CachedPrefix(prompt); got != 12 {
		t.Errorf("CachedPrefix %d, want 12", got)
	}
	if got := m.CachedPrefix(prompt[:12]); got != 8 {
		t.Errorf("CachedPrefix of a 3-block prompt %d, want 8 (the last token is computed)", got)
	}
	wantSkips := map[string]int{SkipBlockSize: 1, SkipLoRA: 1, SkipUnknownParent: 1, SkipTokenCount: 1, SkipMedium: 2, SkipNoBlocks: 1}
	if st := m.Stats(); st.Stored != 2 || !reflect.DeepEqual(st.Skipped, wantSkips) {
		t.Errorf("stats %+v, want 2 stored and skipped %v", st, wantSkips)
	}
	if len(skips) != 7 || skips[0].Reason != SkipBlockSize || skips[0].Detail == "" {
		t.Errorf("Apply returned skips %+v, want the 7 skipped events, each with its reason", skips)
	}
	ev, _, _ := m.Events().Since(0)
	if len(ev) != 2 || ev[0].Kind != kvcache.Stored || !reflect.DeepEqual(ev[0].Hashes, want[:2]) || ev[1].Parent != want[1] ||
		!reflect.DeepEqual(ev[1].Hashes, want[2:3]) {
		t.Errorf("events %+v, want tandem hashes %v", ev, want)
	}
	snap := m.Snapshot()
	if snap.LastEventID != 2 || len(snap.Blocks) != 3 {
		t.Errorf("snapshot %+v", snap)
	}

	m.Apply(Batch{Events: []Event{{Kind: BlockRemoved, BlockHashes: []uint64{0xe8, 0x999}}}})
	if got := m.CachedPrefix(prompt); got != 8 {
		t.Errorf("after removing the third block, CachedPrefix %d", got)
	}
	if ev, _, _ := m.Events().Since(2); len(ev) != 1 || ev[0].Kind != kvcache.Removed || !reflect.DeepEqual(ev[0].Hashes, want[2:3]) {
		t.Errorf("removal events %+v", ev)
	}
	m.Reset()
	if m.Len() != 0 || m.CachedPrefix(prompt) != 0 {
		t.Error("Reset kept blocks")
	}
	if ev, _, _ := m.Events().Since(3); len(ev) != 1 || ev[0].Kind != kvcache.Cleared {
		t.Errorf("reset events %+v", ev)
	}
}

func ptr(v uint64) *uint64 { return &v }

// A first block's parent sent as 0 (llm-d's inference simulator, in the array
// encoding, where vLLM sends nil) starts a chain when no engine block 0 is
// known, and is that block when one is.
func TestMirrorParentZero(t *testing.T) {
	const bs = 4
	prompt := tokens(13, 1)
	m := NewMirror(bs, 64)
	if skips := m.Apply(Batch{Events: []Event{
		stored(ptr(0), []uint64{0xa1}, prompt[:4], bs),
		stored(ptr(0xa1), []uint64{0xa2}, prompt[4:8], bs),
	}}); len(skips) != 0 {
		t.Fatalf("parent 0 skipped: %+v", skips)
	}
	if got := m.CachedPrefix(prompt); got != 8 {
		t.Errorf("a chain starting at parent 0: CachedPrefix %d, want 8", got)
	}

	// An engine whose block hash is 0: parent 0 is that block.
	m = NewMirror(bs, 64)
	m.Apply(Batch{Events: []Event{
		stored(nil, []uint64{0}, prompt[:4], bs),
		stored(ptr(0), []uint64{0xb2}, prompt[4:8], bs),
	}})
	if got := m.CachedPrefix(prompt); got != 8 {
		t.Errorf("parent 0 naming a stored block 0: CachedPrefix %d, want 8", got)
	}
	if got := m.CachedPrefix(append(tokens(4, 5), 0)); got != 0 {
		t.Errorf("the block after block 0 was also keyed as a chain's start (CachedPrefix %d)", got)
	}
}

func FuzzDecodeBatch(f *testing.F) {
	f.Add(encodeBatch(f, false, false, stored(nil, []uint64{1, 2}, tokens(8, 1), 4), Event{Kind: AllBlocksCleared}))
	f.Add(encodeBatch(f, true, true, stored(ptr(5), []uint64{3}, tokens(4, 9), 4), Event{Kind: BlockRemoved, BlockHashes: []uint64{3}}))
	f.Add([]byte{0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x91, 0xa1, 'X', 0xc0})
	f.Fuzz(func(t *testing.T, p []byte) {
		b, err := DecodeBatch(p)
		if err != nil {
			return
		}
		m := NewMirror(4, 16)
		m.Apply(b) // any decoded batch applies without panicking
		for _, ev := range b.Events {
			if ev.Kind < BlockStored || ev.Kind > AllBlocksCleared {
				t.Fatalf("event of kind %d", ev.Kind)
			}
		}
	})
}
