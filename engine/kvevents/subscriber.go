package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
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
	// OnFrames, when set, is called with every message received, live
	// (replay false) or from the replay socket, before it is applied: a
	// recording of the publisher's frames. It runs on the subscriber's
	// goroutine and must not keep or change frames past its return.
	OnFrames func(replay bool, frames [][]byte)
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

// Why the mirror was cleared (a resync): its view of the engine could no
// longer be trusted.
const (
	ResyncGap          = "gap"          // lost batches the replay socket could not give back
	ResyncUndecodable  = "undecodable"  // a batch that could not be decoded
	ResyncRestart      = "restart"      // the sequence started over: a new publisher, an empty cache
	ResyncDisconnected = "disconnected" // the subscription was lost; the engine may have restarted meanwhile
)

// ResyncReasons are every reason the mirror is cleared for.
var ResyncReasons = []string{ResyncGap, ResyncUndecodable, ResyncRestart, ResyncDisconnected}

// SubscriberStats count what a subscriber saw.
type SubscriberStats struct {
	Batches  int // applied, live or replayed
	Replayed int // batches applied from the replay socket
	Gaps     int // sequence gaps seen
	// Resyncs count, by reason (one of ResyncReasons), the times the mirror
	// was cleared to be rebuilt from the events that follow.
	Resyncs map[string]int
	Bad     int // messages that were not (topic, sequence, batch)
}

// Subscriber follows one publisher into a Mirror.
type Subscriber struct {
	cfg    SubscriberConfig
	mirror *Mirror
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	last   int64 // sequence number of the last batch applied; -1 before any, and after a resync
	stats  SubscriberStats
	warned map[string]bool // skip reasons already logged
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
	s := newSubscriber(cfg, m, log)
	go s.run()
	return s, nil
}

func newSubscriber(cfg SubscriberConfig, m *Mirror, log *slog.Logger) *Subscriber {
	if cfg.ReplayTimeout <= 0 {
		cfg.ReplayTimeout = 2 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Subscriber{cfg: cfg, mirror: m, log: log, ctx: ctx, cancel: cancel, done: make(chan struct{}), last: -1,
		stats: SubscriberStats{Resyncs: map[string]int{}}, warned: map[string]bool{}}
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
	st := s.stats
	st.Resyncs = maps.Clone(s.stats.Resyncs)
	return st
}

func (s *Subscriber) run() {
	defer close(s.done)
	for s.ctx.Err() == nil {
		err := s.follow()
		if s.ctx.Err() != nil {
			return
		}
		// The engine may restart before we are back, and its new events would
		// not say what the old one held: the router must not route by blocks
		// the engine may no longer have. The next events (and a replay from the
		// publisher's start) rebuild the view.
		s.mu.Lock()
		heard := s.last >= 0 // else nothing was applied since the view was last cleared
		s.mu.Unlock()
		s.log.Warn("KV events: subscription lost; the view of the engine's cache is cleared until reconnected",
			"endpoint", s.cfg.Endpoint, "error", err)
		if heard {
			s.resync(ResyncDisconnected)
		}
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
		if s.cfg.OnFrames != nil {
			s.cfg.OnFrames(false, msg.Frames)
		}
		s.handle(msg.Frames)
	}
}

// handle applies one (topic, sequence, batch) message, first recovering what a
// jump in the sequence says was missed.
func (s *Subscriber) handle(frames [][]byte) {
	if len(frames) != 3 || len(frames[1]) != 8 || frames[1][0]&0x80 != 0 {
		s.mu.Lock()
		s.stats.Bad++
		bad := s.stats.Bad
		s.mu.Unlock()
		if bad == 1 {
			s.log.Warn("KV events: a message that is not (topic, 8-byte non-negative sequence, batch); ignored", "frames", len(frames))
		}
		return
	}
	seq := int64(binary.BigEndian.Uint64(frames[1]))
	s.mu.Lock()
	last := s.last
	s.mu.Unlock()
	if last >= 0 && seq <= last {
		// One PUB connection never repeats a message, and a replay applies only
		// batches before the live one that asked for it: the same number again,
		// or a lower one, is a new publisher (a restarted engine, which our
		// socket may have reached again without its connection failing). Its
		// cache started empty; what it published before we heard it is replayed.
		s.log.Warn("KV events: the sequence started over; the engine restarted, its cache is empty", "last", last, "seq", seq)
		s.resync(ResyncRestart)
		last = -1
	}
	if seq > last+1 {
		// Missed batches (or, on the first message, those published before we
		// subscribed): replay them if the publisher still holds them.
		if !s.recover(last+1, seq) {
			s.resync(ResyncGap)
		}
	}
	s.apply(seq, frames[2], false)
}

// apply decodes and applies one batch; an undecodable batch is a lost one.
func (s *Subscriber) apply(seq int64, payload []byte, replayed bool) bool {
	b, err := DecodeBatch(payload)
	if err != nil {
		s.log.Warn("KV events: undecodable batch; resynchronising", "seq", seq, "error", err)
		s.resync(ResyncUndecodable)
		s.mu.Lock()
		s.last = seq
		s.mu.Unlock()
		return false
	}
	skips := s.mirror.Apply(b)
	s.mu.Lock()
	s.last = seq
	s.stats.Batches++
	if replayed {
		s.stats.Replayed++
	}
	var first []Skip
	for _, sk := range skips {
		if !s.warned[sk.Reason] {
			s.warned[sk.Reason] = true
			first = append(first, sk)
		}
	}
	s.mu.Unlock()
	for _, sk := range first {
		s.log.Warn("KV events: an event the worker cannot key is skipped (logged once per reason; tandem_kv_events_skipped_total counts them)",
			"reason", sk.Reason, "detail", sk.Detail, "seq", seq)
	}
	return true
}

// resync forgets the mirror's blocks: what it held can no longer be trusted.
// The router then sees less than the engine holds, never more, until the
// events that follow fill the mirror again. The sequence starts over with them.
func (s *Subscriber) resync(reason string) {
	s.mirror.Reset()
	s.mu.Lock()
	s.stats.Resyncs[reason]++
	s.last = -1
	s.mu.Unlock()
	if reason == ResyncGap {
		s.log.Warn("KV events: events lost; the engine's cache view starts over from the next events")
	}
}
