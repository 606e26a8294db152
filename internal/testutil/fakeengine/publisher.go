package fakeengine

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"
)

// Encoding is how a Publisher writes its batches, as vLLM versions have.
type Encoding int

const (
	// ArrayEncoding is msgspec's array_like structs: the batch [ts, events,
	// dp_rank], each event ["BlockStored", block_hashes, parent_block_hash,
	// token_ids, block_size, lora_id, medium], hashes as integers (vLLM before
	// mid-2026, SGLang; examples/online_serving/kv_events_subscriber.py).
	ArrayEncoding Encoding = iota
	// MapEncoding is msgspec's tagged maps: {"ts", "events", "data_parallel_rank"},
	// each event {"type": "BlockStored", "block_hashes", ...}, hashes as 32 bytes
	// whose last 8 are the key (vllm/distributed/kv_events.py of 2026-11, sha256
	// block hashes).
	MapEncoding
)

// PublisherOptions are the ways publishers other than vLLM's differ from it.
type PublisherOptions struct {
	// ReplayTopic answers a replay request with (topic, sequence, batch) frames
	// and ends with an empty topic, as llm-d-inference-sim's replayer does
	// (pkg/kv-cache/kv_events_replayer.go); vLLM's ROUTER answers (sequence,
	// batch) (vllm/distributed/kv_events.py, _service_replay).
	ReplayTopic bool
	// ZeroParent writes a first block's missing parent as 0 in the array
	// encoding, as llm-d-inference-sim does (pkg/kv-cache/kv_cache_sender.go
	// sends kvblock.EmptyBlockHash); vLLM writes nil.
	ZeroParent bool
}

// Publisher is an engine's KV event publisher: a ZMQ PUB socket sending
// (topic, 8-byte big-endian sequence, msgpack batch), and a ROUTER socket that
// replays stored batches from a sequence number (ZmqEventPublisher).
type Publisher struct {
	Endpoint, ReplayEndpoint string
	topic                    string
	enc                      Encoding
	opts                     PublisherOptions

	mu          sync.Mutex
	pub, replay zmq4.Socket
	cancel      context.CancelFunc
	seq         int64
	buffer      [][2][]byte // (sequence, payload), for replay
}

// StoredBlocks is one BlockStored event.
type StoredBlocks struct {
	Hashes    []uint64
	Parent    *uint64
	TokenIDs  []uint32
	BlockSize int
}

type testingT interface {
	Cleanup(func())
	Fatal(...any)
}

// NewPublisher binds both sockets on loopback ports until the test's cleanup.
func NewPublisher(t testingT, topic string, enc Encoding) *Publisher {
	return NewPublisherWith(t, topic, enc, PublisherOptions{})
}

// NewPublisherWith is NewPublisher for a publisher that differs from vLLM's as
// opts say.
func NewPublisherWith(t testingT, topic string, enc Encoding, opts PublisherOptions) *Publisher {
	p := &Publisher{topic: topic, enc: enc, opts: opts}
	if err := p.bind("tcp://127.0.0.1:0", "tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.closeLocked()
	})
	return p
}

// bind opens both sockets on the given endpoints; the caller holds p.mu or
// owns p alone.
func (p *Publisher) bind(endpoint, replayEndpoint string) error {
	ctx, cancel := context.WithCancel(context.Background())
	pub, replay := zmq4.NewPub(ctx), zmq4.NewRouter(ctx)
	if err := pub.Listen(endpoint); err != nil {
		cancel()
		return err
	}
	if err := replay.Listen(replayEndpoint); err != nil {
		cancel()
		_ = pub.Close()
		return err
	}
	p.pub, p.replay, p.cancel = pub, replay, cancel
	p.Endpoint, p.ReplayEndpoint = "tcp://"+pub.Addr().String(), "tcp://"+replay.Addr().String()
	go p.serveReplay(replay)
	return nil
}

func (p *Publisher) closeLocked() {
	if p.cancel == nil {
		return
	}
	p.cancel()
	_ = p.pub.Close()
	_ = p.replay.Close()
	p.cancel = nil
}

// Restart is the engine process restarting: both sockets close (a subscriber's
// connection drops) and bind the same ports again, the sequence starts over at
// 0 and the replay buffer is empty, as a new vLLM's ZmqEventPublisher's are
// (itertools.count() and a fresh deque).
func (p *Publisher) Restart() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeLocked()
	p.seq, p.buffer = 0, nil
	var err error
	// The old listeners are closed; their ports may take a moment to be free.
	for range 50 {
		if err = p.bind(p.Endpoint, p.ReplayEndpoint); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// RestartSequence starts the sequence over at 0 with an empty replay buffer but
// keeps the sockets: what a subscriber sees when a restarted publisher reached
// it without its connection failing (a listening subscriber that a new
// publisher dials while the old connection is not yet known dead).
func (p *Publisher) RestartSequence() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq, p.buffer = 0, nil
}

// Stored publishes one BlockStored batch.
func (p *Publisher) Stored(ev StoredBlocks) { p.publish(true, p.encode(ev, nil, false)) }

// Removed publishes one BlockRemoved batch.
func (p *Publisher) Removed(hashes []uint64) {
	p.publish(true, p.encode(StoredBlocks{}, hashes, false))
}

// Cleared publishes one AllBlocksCleared batch.
func (p *Publisher) Cleared() { p.publish(true, p.encode(StoredBlocks{}, nil, true)) }

// StoredLost stores a BlockStored batch under the next sequence number for
// replay, but never sends it: a subscriber sees a gap.
func (p *Publisher) StoredLost(ev StoredBlocks) { p.publish(false, p.encode(ev, nil, false)) }

func (p *Publisher) publish(send bool, payload []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], uint64(p.seq))
	p.seq++
	p.buffer = append(p.buffer, [2][]byte{seq[:], payload})
	if send && p.pub != nil {
		_ = p.pub.SendMulti(zmq4.NewMsgFrom([]byte(p.topic), seq[:], payload))
	}
}

func (p *Publisher) serveReplay(sock zmq4.Socket) {
	end := make([]byte, 8)
	binary.BigEndian.PutUint64(end, ^uint64(0)) // -1
	for {
		msg, err := sock.Recv()
		if err != nil {
			return
		}
		if len(msg.Frames) != 3 || len(msg.Frames[2]) != 8 {
			continue
		}
		id, start := msg.Frames[0], int64(binary.BigEndian.Uint64(msg.Frames[2]))
		p.mu.Lock()
		batches := append([][2][]byte(nil), p.buffer...)
		p.mu.Unlock()
		reply := func(topic []byte, seq, payload []byte) {
			if p.opts.ReplayTopic {
				_ = sock.SendMulti(zmq4.NewMsgFrom(id, []byte{}, topic, seq, payload))
			} else {
				_ = sock.SendMulti(zmq4.NewMsgFrom(id, []byte{}, seq, payload))
			}
		}
		for _, b := range batches {
			if int64(binary.BigEndian.Uint64(b[0])) >= start {
				reply([]byte(p.topic), b[0], b[1])
			}
		}
		reply(nil, end, []byte{})
	}
}

// encode writes one batch holding one event: stored blocks, removed hashes, or
// (cleared) every block cleared.
func (p *Publisher) encode(st StoredBlocks, removed []uint64, cleared bool) []byte {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	hash := func(h uint64) {
		if p.enc == ArrayEncoding {
			_ = e.EncodeUint64(h)
			return
		}
		b := make([]byte, 32)
		copy(b, fmt.Sprintf("sha256-prefix-%016x", h))
		binary.BigEndian.PutUint64(b[24:], h)
		_ = e.EncodeBytes(b)
	}
	hashes := func(hs []uint64) {
		_ = e.EncodeArrayLen(len(hs))
		for _, h := range hs {
			hash(h)
		}
	}
	key := func(k string) {
		if p.enc == MapEncoding {
			_ = e.EncodeString(k)
		}
	}
	ts := float64(time.Now().UnixNano()) / 1e9
	if p.enc == ArrayEncoding {
		_ = e.EncodeArrayLen(3)
	} else {
		_ = e.EncodeMapLen(3)
	}
	key("ts")
	_ = e.EncodeFloat64(ts)
	key("events")
	_ = e.EncodeArrayLen(1)
	switch {
	case cleared:
		if p.enc == ArrayEncoding {
			_ = e.EncodeArrayLen(1)
		} else {
			_ = e.EncodeMapLen(1)
		}
		key("type")
		_ = e.EncodeString("AllBlocksCleared")
	case removed != nil:
		if p.enc == ArrayEncoding {
			_ = e.EncodeArrayLen(3)
		} else {
			_ = e.EncodeMapLen(3)
		}
		key("type")
		_ = e.EncodeString("BlockRemoved")
		key("block_hashes")
		hashes(removed)
		key("medium")
		_ = e.EncodeString("GPU")
	default:
		if p.enc == ArrayEncoding {
			_ = e.EncodeArrayLen(7)
		} else {
			_ = e.EncodeMapLen(8)
		}
		key("type")
		_ = e.EncodeString("BlockStored")
		key("block_hashes")
		hashes(st.Hashes)
		key("parent_block_hash")
		switch {
		case st.Parent == nil && p.opts.ZeroParent && p.enc == ArrayEncoding:
			_ = e.EncodeUint64(0)
		case st.Parent == nil:
			_ = e.EncodeNil()
		default:
			hash(*st.Parent)
		}
		key("token_ids")
		_ = e.EncodeArrayLen(len(st.TokenIDs))
		for _, t := range st.TokenIDs {
			_ = e.EncodeUint64(uint64(t))
		}
		key("block_size")
		_ = e.EncodeInt(int64(st.BlockSize))
		key("lora_id")
		_ = e.EncodeNil()
		key("medium")
		_ = e.EncodeString("GPU")
		if p.enc == MapEncoding {
			key("lora_name")
			_ = e.EncodeNil()
		}
	}
	key("data_parallel_rank")
	_ = e.EncodeInt(0)
	return buf.Bytes()
}
