package kvevents

import (
	"fmt"
	"maps"
	"sync"

	"github.com/tandem-serve/tandem/kvcache"
	"github.com/tandem-serve/tandem/kvcache/blockhash"
)

// Mirror is tandem's view of one engine's prefix cache, built from the engine's
// events. A stored block is keyed by the chained hash tandem computes from the
// event's token ids (blockhash.Append), so that the router, the frontend and
// the engine agree on it whatever the engine hashes with; the engine's hash is
// kept only to find the block again when it is removed (as llm-d does).
//
// Changes are appended to the mirror's kvcache.EventLog as tandem events, which
// the worker republishes on WatchEvents.
type Mirror struct {
	blockSize int
	log       *kvcache.EventLog

	mu sync.Mutex
	// byEngine maps an engine block hash to tandem's hash of the same block.
	byEngine map[uint64]uint64
	// blocks are the tandem hashes held, with their parents and how many engine
	// blocks stand for each (two engine hashes can name one prefix, e.g. after
	// a change of hash seed).
	blocks map[uint64]*held
	stats  Stats
}

type held struct {
	parent uint64
	refs   int
}

// Stats count what the mirror made of the events it was given.
type Stats struct {
	Stored, Removed, Cleared int // events applied
	// Skipped counts, by reason (one of SkipReasons), the events that named
	// blocks tandem cannot key.
	Skipped map[string]int
}

// Why an event was skipped.
const (
	SkipNoBlocks      = "no_blocks"      // a BlockStored event naming no block
	SkipBlockSize     = "block_size"     // blocks of another size than the worker's
	SkipTokenCount    = "token_count"    // token ids that are not block_size per block
	SkipLoRA          = "lora"           // an adapter's blocks
	SkipMedium        = "medium"         // blocks elsewhere than the GPU (offloaded)
	SkipUnknownParent = "unknown_parent" // chained to a block never seen stored
)

// SkipReasons are every reason an event is skipped for.
var SkipReasons = []string{SkipNoBlocks, SkipBlockSize, SkipTokenCount, SkipLoRA, SkipMedium, SkipUnknownParent}

// Skip is one event the mirror could not apply, and why.
type Skip struct {
	Reason string // one of SkipReasons
	Detail string // what the event said, for a log line
}

// NewMirror returns an empty mirror for an engine with blockSize tokens per
// block, keeping the last logSize tandem events for subscribers that fall behind.
func NewMirror(blockSize, logSize int) *Mirror {
	return &Mirror{blockSize: blockSize, log: kvcache.NewEventLog(logSize),
		byEngine: map[uint64]uint64{}, blocks: map[uint64]*held{}}
}

// Events is the log of tandem events the mirror appends to.
func (m *Mirror) Events() *kvcache.EventLog { return m.log }

// Stats are the mirror's counts so far.
func (m *Mirror) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.stats
	st.Skipped = maps.Clone(m.stats.Skipped)
	return st
}

// Apply applies a batch's events in order and returns those it skipped.
func (m *Mirror) Apply(b Batch) []Skip {
	m.mu.Lock()
	defer m.mu.Unlock()
	var skips []Skip
	for _, ev := range b.Events {
		var sk *Skip
		switch ev.Kind {
		case BlockStored:
			sk = m.store(ev)
		case BlockRemoved:
			sk = m.remove(ev)
		case AllBlocksCleared:
			m.clear()
			m.stats.Cleared++
		}
		if sk != nil {
			if m.stats.Skipped == nil {
				m.stats.Skipped = map[string]int{}
			}
			m.stats.Skipped[sk.Reason]++
			skips = append(skips, *sk)
		}
	}
	return skips
}

// Reset forgets every block, as after events were lost that cannot be replayed:
// subscribers are told the cache was cleared, and the mirror fills again from
// the events that follow. Until then the router sees less than the engine holds,
// never more.
func (m *Mirror) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.clear()
}

func (m *Mirror) clear() {
	clear(m.byEngine)
	clear(m.blocks)
	m.log.Append(kvcache.Cleared, 0, nil)
}

// gpu reports whether medium names the device cache: blocks offloaded elsewhere
// (vLLM's "CPU") are not what a request's prefill reuses directly.
func gpu(medium string) bool { return medium == "" || medium == "GPU" }

// storeSkip is why a BlockStored event cannot be keyed, or nil.
func (m *Mirror) storeSkip(ev Event) *Skip {
	n := len(ev.BlockHashes)
	switch {
	case n == 0:
		return &Skip{SkipNoBlocks, "no block hashes"}
	case ev.BlockSize != m.blockSize:
		return &Skip{SkipBlockSize, fmt.Sprintf("block_size %d, the worker's is %d (--block-size)", ev.BlockSize, m.blockSize)}
	case len(ev.TokenIDs) != n*m.blockSize:
		return &Skip{SkipTokenCount, fmt.Sprintf("%d token ids for %d blocks of %d", len(ev.TokenIDs), n, m.blockSize)}
	case ev.LoRA:
		return &Skip{SkipLoRA, "blocks of a LoRA adapter"}
	case !gpu(ev.Medium):
		return &Skip{SkipMedium, fmt.Sprintf("medium %q", ev.Medium)}
	}
	return nil
}

func (m *Mirror) store(ev Event) *Skip {
	if sk := m.storeSkip(ev); sk != nil {
		return sk
	}
	n := len(ev.BlockHashes)
	parent := uint64(0)
	if ev.HasParent {
		p, ok := m.byEngine[ev.Parent]
		switch {
		case ok:
			parent = p
		case ev.Parent == 0:
			// Publishers that write the array encoding from a typed struct send
			// a missing parent as 0 where vLLM sends nil (llm-d's inference
			// simulator): with no engine block 0 known, 0 is the sequence's start.
		default:
			// The chain's start was never seen (stored before we subscribed, or
			// evicted and stored again out of order): these blocks cannot be
			// keyed as the prefix they are.
			return &Skip{SkipUnknownParent, fmt.Sprintf("parent block %#x never seen stored", ev.Parent)}
		}
	}
	hashes := blockhash.Append(make([]uint64, 0, n), parent, ev.TokenIDs, m.blockSize)
	prev := parent
	for i, h := range hashes {
		if old, ok := m.byEngine[ev.BlockHashes[i]]; ok {
			m.unref(old)
		}
		m.byEngine[ev.BlockHashes[i]] = h
		if b, ok := m.blocks[h]; ok {
			b.refs++
		} else {
			m.blocks[h] = &held{parent: prev, refs: 1}
		}
		prev = h
	}
	m.log.Append(kvcache.Stored, parent, hashes)
	m.stats.Stored++
	return nil
}

func (m *Mirror) remove(ev Event) *Skip {
	if !gpu(ev.Medium) {
		return &Skip{SkipMedium, fmt.Sprintf("medium %q", ev.Medium)}
	}
	var gone []uint64
	for _, eh := range ev.BlockHashes {
		h, ok := m.byEngine[eh]
		if !ok {
			continue
		}
		delete(m.byEngine, eh)
		if m.unref(h) {
			gone = append(gone, h)
		}
	}
	if len(gone) > 0 {
		m.log.Append(kvcache.Removed, 0, gone)
	}
	m.stats.Removed++
	return nil
}

// unref drops one engine block's claim on h, reporting whether h is now gone.
func (m *Mirror) unref(h uint64) bool {
	b, ok := m.blocks[h]
	if !ok {
		return false
	}
	if b.refs--; b.refs > 0 {
		return false
	}
	delete(m.blocks, h)
	return true
}

// CachedPrefix is how many leading tokens of prompt the engine holds, as far as
// its events said: whole blocks, never the last token.
func (m *Mirror) CachedPrefix(prompt []uint32) int {
	hashes := blockhash.Hash(prompt, m.blockSize)
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for n < len(hashes) && m.blocks[hashes[n]] != nil {
		n++
	}
	return min(n, (len(prompt)-1)/m.blockSize) * m.blockSize
}

// Snapshot is every block held and the id of the last event it includes.
func (m *Mirror) Snapshot() kvcache.Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	snap := kvcache.Snapshot{LastEventID: m.log.LastID(), Blocks: make([]kvcache.CachedBlock, 0, len(m.blocks))}
	for h, b := range m.blocks {
		snap.Blocks = append(snap.Blocks, kvcache.CachedBlock{Hash: h, Parent: b.parent})
	}
	return snap
}

// Len is the number of blocks held.
func (m *Mirror) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.blocks)
}
