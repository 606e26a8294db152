// Package kvevents follows a GPU engine's own KV cache events and keeps tandem's
// view of that engine's prefix cache: the blocks it holds, under tandem's block
// hashes, published as tandem KV events for the router.
//
// The wire format is vLLM's (vllm/distributed/kv_events.py, vLLM v0.11 to main
// of 2026-11; the example subscriber examples/online_serving/kv_events_subscriber.py):
// a ZMQ PUB socket sends multipart messages (topic, 8-byte big-endian sequence
// number, msgpack EventBatch) and a ROUTER socket replays stored batches from a
// sequence number on request. The msgpack encoding is msgspec's: older versions
// encode the batch and each event as positional arrays (the event's class name
// first); newer ones encode both as maps, the event's class name under "type".
// SGLang and TensorRT-LLM publish the same batch and event structs.
package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Kind is what an event says happened.
type Kind int

const (
	BlockStored Kind = iota + 1
	BlockRemoved
	AllBlocksCleared
)

func (k Kind) String() string {
	switch k {
	case BlockStored:
		return "BlockStored"
	case BlockRemoved:
		return "BlockRemoved"
	case AllBlocksCleared:
		return "AllBlocksCleared"
	}
	return "unknown"
}

// Event is one engine cache event. Hashes are the engine's own: they depend on
// its hash function and PYTHONHASHSEED, so tandem only uses them as keys to find
// the blocks an event names, never as block identities.
type Event struct {
	Kind        Kind
	BlockHashes []uint64
	// Parent is the engine hash of the block before BlockHashes[0]; HasParent is
	// false at the start of a sequence.
	Parent    uint64
	HasParent bool
	// TokenIDs are the tokens of the stored blocks, BlockSize per block.
	TokenIDs  []uint32
	BlockSize int
	// LoRA is set for blocks computed with an adapter (lora_id or lora_name).
	LoRA bool
	// Medium is where the blocks live ("GPU", "CPU", ...); "" when not said.
	Medium string
}

// Batch is one published EventBatch.
type Batch struct {
	TS     float64
	Events []Event
	// DPRank is the data-parallel rank that published it (-1: not said).
	DPRank int
}

// maxDepth bounds the nesting of values this decoder skips: no field of an event
// batch nests deeper, and unbounded recursion on hostile input would exhaust the
// stack.
const maxDepth = 16

// ErrFormat is a payload that is not an event batch.
var ErrFormat = errors.New("kvevents: not a KV event batch")

// DecodeBatch decodes one msgpack EventBatch, in either encoding. Events of a kind
// it does not know are skipped, as are fields it does not know.
func DecodeBatch(payload []byte) (Batch, error) {
	r := bytes.NewReader(payload)
	d := msgpack.NewDecoder(r)
	b := Batch{DPRank: -1}
	c, err := d.PeekCode()
	if err != nil {
		return Batch{}, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	err = fields(d, r, c, []string{"ts", "events", "data_parallel_rank"}, func(name string) error {
		var err error
		switch name {
		case "ts":
			b.TS, err = d.DecodeFloat64()
		case "events":
			b.Events, err = decodeEvents(d, r)
		case "data_parallel_rank":
			var rank int64
			if rank, err = optInt(d); err == nil {
				b.DPRank = int(rank)
			}
		default:
			err = skip(d, 0)
		}
		return err
	})
	if err != nil {
		return Batch{}, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	if r.Len() != 0 {
		return Batch{}, fmt.Errorf("%w: %d bytes after the batch", ErrFormat, r.Len())
	}
	return b, nil
}

// fields calls field for each field of the struct that begins with code c, by
// name: a map's keys, or an array's positions named by order (positions past
// order are passed as "").
func fields(d *msgpack.Decoder, r *bytes.Reader, c byte, order []string, field func(name string) error) error {
	switch {
	case isArray(c):
		n, err := arrayLen(d, r)
		if err != nil {
			return err
		}
		for i := range n {
			name := ""
			if i < len(order) {
				name = order[i]
			}
			if err := field(name); err != nil {
				return fmt.Errorf("field %d (%s): %w", i, name, err)
			}
		}
		return nil
	case isMap(c):
		n, err := d.DecodeMapLen()
		if err != nil {
			return err
		}
		if n > r.Len() {
			return fmt.Errorf("map of %d entries in %d bytes", n, r.Len())
		}
		for range n {
			name, err := d.DecodeString()
			if err != nil {
				return fmt.Errorf("map key: %w", err)
			}
			if err := field(name); err != nil {
				return fmt.Errorf("field %q: %w", name, err)
			}
		}
		return nil
	}
	return fmt.Errorf("a struct is an array or a map, not msgpack code %#x", c)
}

func decodeEvents(d *msgpack.Decoder, r *bytes.Reader) ([]Event, error) {
	n, err := arrayLen(d, r)
	if err != nil {
		return nil, err
	}
	events := make([]Event, 0, n)
	for i := range n {
		ev, ok, err := decodeEvent(d, r)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		if ok {
			events = append(events, ev)
		}
	}
	return events, nil
}

// eventFields are each kind's fields in the order of the array encoding
// (kv_events.py: the class's fields in declaration order, the tag first).
var eventFields = map[string][]string{
	"BlockStored":      {"type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"},
	"BlockRemoved":     {"type", "block_hashes", "medium"},
	"AllBlocksCleared": {"type"},
}

// decodeEvent decodes one tagged event; ok is false for a kind it skipped.
func decodeEvent(d *msgpack.Decoder, r *bytes.Reader) (Event, bool, error) {
	c, err := d.PeekCode()
	if err != nil {
		return Event{}, false, err
	}
	var ev Event
	tag := ""
	if isArray(c) {
		// The tag is the first element: read it before naming the rest.
		n, err := arrayLen(d, r)
		if err != nil {
			return Event{}, false, err
		}
		if n == 0 {
			return Event{}, false, errors.New("empty event array")
		}
		if tag, err = d.DecodeString(); err != nil {
			return Event{}, false, fmt.Errorf("tag: %w", err)
		}
		order := eventFields[tag]
		for i := 1; i < n; i++ {
			name := ""
			if i < len(order) {
				name = order[i]
			}
			if err := eventField(d, r, &ev, name); err != nil {
				return Event{}, false, fmt.Errorf("%s field %d (%s): %w", tag, i, name, err)
			}
		}
	} else {
		err := fields(d, r, c, nil, func(name string) error {
			if name == "type" {
				var err error
				tag, err = d.DecodeString()
				return err
			}
			return eventField(d, r, &ev, name)
		})
		if err != nil {
			return Event{}, false, err
		}
	}
	switch tag {
	case "BlockStored":
		ev.Kind = BlockStored
	case "BlockRemoved":
		ev.Kind = BlockRemoved
	case "AllBlocksCleared":
		ev.Kind = AllBlocksCleared
	default:
		return Event{}, false, nil
	}
	return ev, true, nil
}

func eventField(d *msgpack.Decoder, r *bytes.Reader, ev *Event, name string) error {
	var err error
	switch name {
	case "block_hashes":
		var n int
		if n, err = arrayLen(d, r); err != nil {
			return err
		}
		ev.BlockHashes = make([]uint64, n)
		for i := range ev.BlockHashes {
			if ev.BlockHashes[i], err = blockHash(d); err != nil {
				return err
			}
		}
	case "parent_block_hash":
		if isNil(d) {
			return d.DecodeNil()
		}
		ev.HasParent = true
		ev.Parent, err = blockHash(d)
	case "token_ids":
		var n int
		if n, err = arrayLen(d, r); err != nil {
			return err
		}
		ev.TokenIDs = make([]uint32, n)
		for i := range ev.TokenIDs {
			var t uint64
			if t, err = d.DecodeUint64(); err != nil {
				return err
			}
			if t > 1<<32-1 {
				return fmt.Errorf("token id %d does not fit 32 bits", t)
			}
			ev.TokenIDs[i] = uint32(t)
		}
	case "block_size":
		var n int64
		if n, err = d.DecodeInt64(); err == nil && (n <= 0 || n > 1<<20) {
			err = fmt.Errorf("block size %d", n)
		}
		ev.BlockSize = int(n)
	case "lora_id", "lora_name":
		if isNil(d) {
			return d.DecodeNil()
		}
		ev.LoRA = true
		err = skip(d, 0)
	case "medium":
		if isNil(d) {
			return d.DecodeNil()
		}
		ev.Medium, err = d.DecodeString()
	default:
		err = skip(d, 0)
	}
	return err
}

// blockHash reads an ExternalBlockHash: an integer (uint64 with
// VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES, possibly above 2^63) or bytes, of which
// the last 8, big-endian, are the key (vLLM's maybe_convert_block_hash).
func blockHash(d *msgpack.Decoder) (uint64, error) {
	c, err := d.PeekCode()
	if err != nil {
		return 0, err
	}
	if msgpcode.IsBin(c) || msgpcode.IsString(c) {
		b, err := d.DecodeBytes()
		if err != nil {
			return 0, err
		}
		if len(b) == 0 {
			return 0, errors.New("empty block hash")
		}
		var last [8]byte
		copy(last[8-min(8, len(b)):], b[max(0, len(b)-8):])
		return binary.BigEndian.Uint64(last[:]), nil
	}
	if c == msgpcode.Int8 || c == msgpcode.Int16 || c == msgpcode.Int32 || c == msgpcode.Int64 || c >= msgpcode.NegFixedNumLow {
		v, err := d.DecodeInt64()
		return uint64(v), err // a negative Python hash keeps its 64 bits
	}
	return d.DecodeUint64()
}

func optInt(d *msgpack.Decoder) (int64, error) {
	if isNil(d) {
		return -1, d.DecodeNil()
	}
	return d.DecodeInt64()
}

func isNil(d *msgpack.Decoder) bool {
	c, err := d.PeekCode()
	return err == nil && c == msgpcode.Nil
}

func isArray(c byte) bool {
	return msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32
}
func isMap(c byte) bool { return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32 }

// arrayLen reads an array header whose length the rest of the payload can hold
// (every element takes at least a byte), so a forged length allocates nothing.
func arrayLen(d *msgpack.Decoder, r *bytes.Reader) (int, error) {
	n, err := d.DecodeArrayLen()
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, errors.New("nil where an array belongs")
	}
	if n > r.Len() {
		return 0, fmt.Errorf("array of %d elements in %d bytes", n, r.Len())
	}
	return n, nil
}

// skip passes over one value, refusing nesting deeper than maxDepth.
func skip(d *msgpack.Decoder, depth int) error {
	if depth > maxDepth {
		return errors.New("values nested too deep")
	}
	c, err := d.PeekCode()
	if err != nil {
		return err
	}
	switch {
	case isArray(c):
		n, err := d.DecodeArrayLen()
		if err != nil {
			return err
		}
		for range n {
			if err := skip(d, depth+1); err != nil {
				return err
			}
		}
		return nil
	case isMap(c):
		n, err := d.DecodeMapLen()
		if err != nil {
			return err
		}
		for range 2 * n {
			if err := skip(d, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return d.Skip()
}
