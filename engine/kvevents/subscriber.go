package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// SubscriberConfig is where an engine publishes its KV events (vLLM's
// --kv-events-config endpoint, replay_endpoint and topic, as a subscriber
// reaches them).
type SubscriberConfig struct {
	// Endpoint is the publisher: tcp://host:port is dialled (the engine binds, as
	// vLLM does with tcp://*:port); tcp://*:port listens, for publishers that
	// dial their subscriber (llm-d's inference simulator).
	Endpoint string
	// ReplayEndpoint is the publisher's ROUTER socket; empty: lost events are
	// never replayed, the mirror resynchronises instead.
	ReplayEndpoint string
	Topic          string
	// ReplayTimeout bounds one replay; 0 means 2 s.
	ReplayTimeout time.Duration
}

// Validate checks the endpoints' form.
func (c SubscriberConfig) Validate() error {
	if c.Endpoint == "" {
		if c.ReplayEndpoint != "" {
			return fmt.Errorf("KV events replay endpoint %q without an endpoint to subscribe to", c.ReplayEndpoint)
		}
		return nil
	}
	for _, ep := range []string{c.Endpoint, c.ReplayEndpoint} {
		if ep != "" && !strings.HasPrefix(ep, "tcp://") && !strings.HasPrefix(ep, "ipc://") {
			return fmt.Errorf("KV events endpoint %q: want tcp://host:port or ipc://path", ep)
		}
	}
	if strings.Contains(c.ReplayEndpoint, "*") {
		return fmt.Errorf("KV events replay endpoint %q: the engine binds it; give its host", c.ReplayEndpoint)
	}
	return nil
}

// SubscriberStats count what a subscriber saw.
type SubscriberStats struct {
	Batches  int // applied, live or replayed
	Replayed int // batches applied from the replay socket
	Gaps     int // sequence gaps seen
	Resyncs  int // gaps (or undecodable batches) that ended in a Reset
	Bad      int // messages that were not (topic, sequence, batch)
}

// Subscriber follows one publisher into a Mirror.
type Subscriber struct {
	cfg    SubscriberConfig
	mirror *Mirror
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	last  int64 // sequence number of the last batch applied; -1 before any
	stats SubscriberStats
}

// Subscribe starts following cfg's publisher into m, in the background: a
// publisher that is not up yet is waited for.
func Subscribe(cfg SubscriberConfig, m *Mirror, log *slog.Logger) (*Subscriber, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Endpoint == "" {
		return nil, errors.New("no KV events endpoint")
	}
	if cfg.ReplayTimeout <= 0 {
		cfg.ReplayTimeout = 2 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Subscriber{cfg: cfg, mirror: m, log: log, ctx: ctx, cancel: cancel, done: make(chan struct{}), last: -1}
	go s.run()
	return s, nil
}

// Close stops following and waits for the subscriber to end.
func (s *Subscriber) Close() {
	s.cancel()
	<-s.done
}

// Stats are the subscriber's counts so far.
func (s *Subscriber) Stats() SubscriberStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

func (s *Subscriber) run() {
	defer close(s.done)
	for s.ctx.Err() == nil {
		err := s.follow()
		if s.ctx.Err() != nil {
			return
		}
		s.log.Warn("KV events: subscription lost; reconnecting", "endpoint", s.cfg.Endpoint, "error", err)
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// follow connects once and applies messages until the connection fails.
func (s *Subscriber) follow() error {
	sock := zmq4.NewSub(s.ctx, zmq4.WithDialerRetry(250*time.Millisecond), zmq4.WithDialerMaxRetries(-1))
	defer sock.Close()
	var err error
	if strings.Contains(s.cfg.Endpoint, "*") {
		err = sock.Listen(strings.Replace(s.cfg.Endpoint, "*", "0.0.0.0", 1))
	} else {
		err = sock.Dial(s.cfg.Endpoint)
	}
	if err != nil {
		return err
	}
	if err := sock.SetOption(zmq4.OptionSubscribe, s.cfg.Topic); err != nil {
		return err
	}
	s.log.Info("KV events: subscribed", "endpoint", s.cfg.Endpoint, "replay_endpoint", s.cfg.ReplayEndpoint, "topic", s.cfg.Topic)
	for {
		msg, err := sock.Recv()
		if err != nil {
			return err
		}
		s.handle(msg.Frames)
	}
}

// handle applies one (topic, sequence, batch) message, first recovering what a
// jump in the sequence says was missed.
func (s *Subscriber) handle(frames [][]byte) {
	if len(frames) != 3 || len(frames[1]) != 8 {
		s.mu.Lock()
		s.stats.Bad++
		bad := s.stats.Bad
		s.mu.Unlock()
		if bad == 1 {
			s.log.Warn("KV events: a message that is not (topic, 8-byte sequence, batch); ignored", "frames", len(frames))
		}
		return
	}
	seq := int64(binary.BigEndian.Uint64(frames[1]))
	s.mu.Lock()
	last := s.last
	s.mu.Unlock()
	switch {
	case last >= 0 && seq == last:
		return // a duplicate
	case last >= 0 && seq < last:
		// The publisher started over (a restarted engine): its cache did too.
		s.log.Warn("KV events: the sequence went back; the engine restarted, its cache is empty", "last", last, "seq", seq)
		s.resync(false)
	case seq > last+1:
		// Missed batches (or, on the first message, those published before we
		// subscribed): replay them if the publisher still holds them.
		if !s.recover(last+1, seq) {
			s.resync(last >= 0)
		}
	}
	s.apply(seq, frames[2], false)
}

// apply decodes and applies one batch; an undecodable batch is a lost one.
func (s *Subscriber) apply(seq int64, payload []byte, replayed bool) bool {
	b, err := DecodeBatch(payload)
	if err != nil {
		s.log.Warn("KV events: undecodable batch; resynchronising", "seq", seq, "error", err)
		s.resync(true)
		s.mu.Lock()
		s.last = seq
		s.mu.Unlock()
		return false
	}
	s.mirror.Apply(b)
	s.mu.Lock()
	s.last = seq
	s.stats.Batches++
	if replayed {
		s.stats.Replayed++
	}
	s.mu.Unlock()
	return true
}

// resync forgets the mirror's blocks: events were lost that nothing can replay.
// gap says whether this follows a gap (counted) rather than a restart.
func (s *Subscriber) resync(gap bool) {
	s.mirror.Reset()
	s.mu.Lock()
	s.stats.Resyncs++
	s.mu.Unlock()
	if gap {
		s.log.Warn("KV events: events lost; the engine's cache view starts over from the next events")
	}
}

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
	got, err := s.replay(ctx, from, to)
	if err != nil {
		s.log.Warn("KV events: replay failed", "endpoint", s.cfg.ReplayEndpoint, "from", from, "error", err)
		return first
	}
	if got != from && !first {
		s.log.Warn("KV events: the replay did not reach back far enough", "wanted_from", from, "got_to", got)
		return false
	}
	if !first {
		s.log.Info("KV events: gap replayed", "from", from, "to", to-1)
	}
	return true
}

// replay asks the ROUTER socket for batches from `from` on and applies those
// before `to`. It returns the first sequence number it applied up to the end
// (from when nothing was lost), reading until the end marker (sequence -1).
func (s *Subscriber) replay(ctx context.Context, from, to int64) (int64, error) {
	d := zmq4.NewDealer(ctx, zmq4.WithDialerMaxRetries(3), zmq4.WithDialerRetry(100*time.Millisecond))
	defer d.Close()
	if err := d.Dial(s.cfg.ReplayEndpoint); err != nil {
		return 0, err
	}
	var start [8]byte
	binary.BigEndian.PutUint64(start[:], uint64(from))
	// The empty delimiter a REQ socket would add, which the publisher expects.
	if err := d.SendMulti(zmq4.NewMsgFrom([]byte{}, start[:])); err != nil {
		return 0, err
	}
	firstApplied := int64(-1)
	next := from
	for {
		msg, err := d.Recv()
		if err != nil {
			return 0, err
		}
		f := msg.Frames
		for len(f) > 0 && len(f[0]) == 0 {
			f = f[1:]
		}
		if len(f) != 2 || len(f[0]) != 8 {
			return 0, fmt.Errorf("replay answered %d frames, want (sequence, batch)", len(msg.Frames))
		}
		seq := int64(binary.BigEndian.Uint64(f[0]))
		if seq < 0 {
			break // the end marker
		}
		if seq < next || seq >= to {
			continue // already applied, or live messages will bring it
		}
		if firstApplied < 0 {
			firstApplied = seq
		}
		if seq != next && firstApplied != seq {
			return 0, fmt.Errorf("replay skipped from %d to %d", next, seq)
		}
		s.apply(seq, f[1], true)
		next = seq + 1
	}
	if next != to {
		return 0, fmt.Errorf("replay ended at %d, before %d", next, to)
	}
	if firstApplied < 0 {
		return from, nil
	}
	return firstApplied, nil
}
