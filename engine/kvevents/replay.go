package kvevents

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/go-zeromq/zmq4"
)

// recover replays batches [from, to) from the replay socket, reporting whether
// all of them were applied. On the first message (from 0) there may be nothing
// lost at all: an engine that published before we came is replayed from its
// start, as far as its buffer reaches.
func (s *Subscriber) recover(from, to int64) bool {
	first := from == 0
	if !first {
		s.mu.Lock()
		s.stats.Gaps++
		s.mu.Unlock()
		s.log.Warn("KV events: sequence gap", "missing_from", from, "missing_to", to-1)
	}
	if s.cfg.ReplayEndpoint == "" {
		return first // nothing to replay from; before the first message nothing was ours to lose
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ReplayTimeout)
	defer cancel()
	got, next, err := s.replay(ctx, from, to)
	switch {
	case err != nil:
		s.log.Warn("KV events: replay failed", "endpoint", s.cfg.ReplayEndpoint, "from", from, "applied_to", next-1, "error", err)
		// Batches applied up to a failure leave out those after them, removals
		// included: the view could hold blocks the engine has dropped.
		return first && next == from
	case first:
		// Whatever the buffer held before the live message is applied, as long
		// as it reached up to it; a publisher that numbers from 1 (llm-d's
		// inference simulator) holds nothing before it.
		return next == to || next == from
	case got != from || next != to:
		s.log.Warn("KV events: the replay did not hold every missed batch", "wanted_from", from, "wanted_to", to-1,
			"got_from", got, "got_to", next-1)
		return false
	}
	s.log.Info("KV events: gap replayed", "from", from, "to", to-1)
	return true
}

// replay asks the ROUTER socket for batches from `from` on and applies those
// before `to`, reading until the end marker (sequence -1). It returns the
// sequence number of the first batch it applied (to when none) and the one
// after the last (from when none), also with an error.
func (s *Subscriber) replay(ctx context.Context, from, to int64) (got, next int64, err error) {
	got, next = to, from
	d := zmq4.NewDealer(ctx, zmq4.WithDialerMaxRetries(3), zmq4.WithDialerRetry(100*time.Millisecond))
	defer d.Close()
	if err := d.Dial(s.cfg.ReplayEndpoint); err != nil {
		return got, next, err
	}
	var start [8]byte
	binary.BigEndian.PutUint64(start[:], uint64(from))
	// The empty delimiter a REQ socket would add, which the publisher expects.
	if err := d.SendMulti(zmq4.NewMsgFrom([]byte{}, start[:])); err != nil {
		return got, next, err
	}
	for {
		msg, err := d.Recv()
		if err != nil {
			return got, next, err
		}
		if s.cfg.OnFrames != nil {
			s.cfg.OnFrames(true, msg.Frames)
		}
		seq, payload, err := replayed(msg.Frames)
		if err != nil {
			return got, next, err
		}
		if seq < 0 {
			return got, next, nil // the end marker
		}
		if seq < next || seq >= to {
			continue // already applied, or live messages will bring it
		}
		if got == to {
			got = seq // the buffer may not reach back to from
		} else if seq != next {
			return got, next, fmt.Errorf("replay skipped from %d to %d", next, seq)
		}
		s.apply(seq, payload, true)
		next = seq + 1
	}
}

// replayed reads one replay answer: vLLM's ROUTER sends (empty delimiter,
// sequence, batch); llm-d's inference simulator (and publishers modelled on it)
// put the topic before the sequence, as on the live socket. The end marker is
// sequence -1 with an empty batch (and an empty topic).
func replayed(frames [][]byte) (int64, []byte, error) {
	f := frames
	if len(f) > 0 && len(f[0]) == 0 {
		f = f[1:] // the delimiter, when the socket leaves it in
	}
	switch {
	case len(f) == 2 && len(f[0]) == 8:
		return int64(binary.BigEndian.Uint64(f[0])), f[1], nil
	case len(f) == 3 && len(f[1]) == 8:
		return int64(binary.BigEndian.Uint64(f[1])), f[2], nil
	}
	sizes := make([]int, len(frames))
	for i, fr := range frames {
		sizes[i] = len(fr)
	}
	return 0, nil, fmt.Errorf("replay answered %d frames of %v bytes, want ([topic,] 8-byte sequence, batch)", len(frames), sizes)
}
