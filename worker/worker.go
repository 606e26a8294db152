// Package worker serves what every worker (decode, prefill, aggregated) says about
// itself: its identity and mode, and the stream of KV events and load the router's
// index is built from.
package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/handoff"
	"github.com/tandem-serve/tandem/kvcache"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/proto/tandem/worker/v1/workerv1connect"
)

// Service implements WorkerService over one engine.
type Service struct {
	id          string
	incarnation string
	mode        workerv1.WorkerMode
	version     string
	eng         engine.Engine
	// policy reports a decode worker's prefill policy now; nil for other modes.
	policy     func() *workerv1.PrefillPolicy
	setServing func(bool)
	kvPort     int
	lends      bool
	lent       LentQueue
	card       *workerv1.ModelCard
	// Heartbeat is the longest gap between WatchEvents messages.
	Heartbeat time.Duration
	stopping  chan struct{}
	stopOnce  sync.Once

	mu       sync.Mutex
	draining bool
	// unavailable says why the engine cannot serve now; "" while it can.
	unavailable string
	changed     chan struct{} // closed and replaced when draining or unavailable changes
}

var _ workerv1connect.WorkerServiceHandler = (*Service)(nil)

// New returns the service for the worker id running eng in mode. incarnation must
// change whenever the engine's cache starts over (a new process).
func New(id, incarnation string, mode workerv1.WorkerMode, version string, eng engine.Engine) *Service {
	return &Service{id: id, incarnation: incarnation, mode: mode, version: version, eng: eng, Heartbeat: time.Second,
		stopping: make(chan struct{}), changed: make(chan struct{})}
}

// Stop ends every WatchEvents stream, so that a draining worker's subscribers
// (which would otherwise never hang up) do not hold its shutdown for the whole grace
// period. They see the stream end and the worker leave.
func (s *Service) Stop() { s.stopOnce.Do(func() { close(s.stopping) }) }

// SetServingHook is how Drain changes the worker's health.
func (s *Service) SetServingHook(f func(serving bool)) { s.setServing = f }

// Drain turns the worker's health NOT_SERVING (or back to SERVING) without
// stopping it: Consul's check fails, discovery drops it, in-flight work finishes.
// Event subscribers (the router, decode workers) are told at once in the stream, so
// static discovery stops sending work too.
func (s *Service) Drain(_ context.Context, req *connect.Request[workerv1.DrainRequest]) (*connect.Response[workerv1.DrainResponse], error) {
	if s.setServing == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("this worker cannot be drained"))
	}
	// Health and the pushed flag change together, so that a drain and an undo at
	// once cannot leave them disagreeing (setServing does not block).
	s.mu.Lock()
	s.setServing(req.Msg.GetServing())
	if s.draining != !req.Msg.GetServing() {
		s.draining = !req.Msg.GetServing()
		close(s.changed)
		s.changed = make(chan struct{})
	}
	s.mu.Unlock()
	return connect.NewResponse(&workerv1.DrainResponse{}), nil
}

// SetUnavailable says why the worker cannot serve now (its engine is down), or
// "" once it can again. Event subscribers are told at once, and read it as a
// drain: they send the worker nothing new until it clears.
func (s *Service) SetUnavailable(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unavailable != reason {
		s.unavailable = reason
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

// drainState is whether the worker drains, why it cannot serve (if it cannot),
// and a channel closed when either changes.
func (s *Service) drainState() (bool, string, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining, s.unavailable, s.changed
}

// SetKVTransferPort makes Info report the port a prefill worker serves KV
// transfers on.
func (s *Service) SetKVTransferPort(port int) { s.kvPort = port }

// SetLendsPrefill makes Info say that this aggregated worker serves Prefill for
// decode workers too (--lend-prefill).
func (s *Service) SetLendsPrefill(lends bool) { s.lends = lends }

// LentQueue is a worker's prefill service as its load report sees it.
type LentQueue interface {
	// QueuedTokens are the prompt tokens accepted for decode workers and not yet
	// prefilled.
	QueuedTokens() uint64
	// QueueEmptied is closed when they next fall to none.
	QueueEmptied() <-chan struct{}
}

// SetLentQueue makes the load report carry the prefill service's queue
// (Load.lent_waiting_tokens), sent again as soon as it empties. Call it before
// serving.
func (s *Service) SetLentQueue(q LentQueue) { s.lent = q }

// SetModelCard sets what ModelCard returns; its model id is also the one Info reports.
func (s *Service) SetModelCard(card *workerv1.ModelCard) { s.card = card }

// ModelCard returns the model card, for the frontend to learn the model from.
func (s *Service) ModelCard(context.Context, *connect.Request[workerv1.ModelCardRequest]) (*connect.Response[workerv1.ModelCardResponse], error) {
	if s.card == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("this worker publishes no model card"))
	}
	return connect.NewResponse(&workerv1.ModelCardResponse{Card: s.card}), nil
}

// SetPolicy makes Info and the event stream report a decode worker's prefill
// policy, which may change at run time.
func (s *Service) SetPolicy(policy func() *workerv1.PrefillPolicy) { s.policy = policy }

// WorkerInfo is this worker's identity as the protos carry it.
func (s *Service) WorkerInfo() *workerv1.WorkerInfo {
	info := s.eng.Info()
	wi := &workerv1.WorkerInfo{
		Id: s.id, Mode: s.mode, Model: info.Model, Engine: info.Engine,
		Layout: handoff.LayoutProto(info.Layout), TotalBlocks: uint32(info.TotalBlocks), Version: s.version,
		KvTransferPort: uint32(s.kvPort), LendsPrefill: s.lends,
	}
	if s.policy != nil {
		wi.PrefillPolicy = s.policy().GetPolicy()
	}
	if r, ok := s.eng.(EventReporter); ok && !r.ReportsKVEvents() {
		wi.NoKvEvents = true
	}
	if s.card != nil {
		wi.Model = s.card.GetModel()
	}
	draining, unavailable, _ := s.drainState()
	wi.Draining, wi.Unavailable = draining || unavailable != "", unavailable
	return wi
}

func (s *Service) Info(context.Context, *connect.Request[workerv1.InfoRequest]) (*connect.Response[workerv1.InfoResponse], error) {
	return connect.NewResponse(&workerv1.InfoResponse{Info: s.WorkerInfo(), Load: s.loadProto()}), nil
}

// EventReporter is implemented by engines that may report no KV cache events
// (an engine server without a KV event publisher); others do.
type EventReporter interface {
	ReportsKVEvents() bool
}

// Snapshotter is implemented by engines whose pool can list its cached blocks
// together with the id of the last event that list includes.
type Snapshotter interface {
	Snapshot() kvcache.Snapshot
}

// WatchEvents sends a snapshot when the subscriber holds nothing or has fallen out
// of the event ring, then every event as it happens, with the load, and at least one
// message per heartbeat. An engine that announces a new prompt in its queue
// (engine.LoadNotifier) has its load sent then too.
func (s *Service) WatchEvents(ctx context.Context, req *connect.Request[workerv1.WatchEventsRequest],
	stream *connect.ServerStream[workerv1.WatchEventsResponse]) error {
	log := s.eng.Events()
	after := req.Msg.GetAfterEventId()
	needSnapshot := after == 0
	tick := time.NewTicker(s.Heartbeat)
	defer tick.Stop()
	notifier, _ := s.eng.(engine.LoadNotifier)
	for {
		// Taken before the load is read, so a change after the read wakes the next.
		var loadChanged, lentEmptied <-chan struct{}
		if notifier != nil {
			loadChanged = notifier.LoadChanged()
		}
		if s.lent != nil {
			lentEmptied = s.lent.QueueEmptied()
		}
		msg := &workerv1.WatchEventsResponse{Incarnation: s.incarnation}
		events, changed, ok := log.Since(after)
		if needSnapshot || !ok {
			hashes, last := s.snapshot(log)
			msg.Snapshot = &workerv1.Snapshot{LastEventId: last, BlockHashes: hashes}
			after, needSnapshot = last, false
			events, changed, _ = log.Since(after)
		}
		for _, ev := range events {
			msg.Events = append(msg.Events, eventProto(ev))
			after = ev.ID
		}
		msg.Load = s.loadProto()
		if s.policy != nil {
			msg.PrefillPolicy = s.policy()
		}
		draining, unavailable, drainChanged := s.drainState()
		msg.Draining, msg.Unavailable = draining || unavailable != "", unavailable
		if err := stream.Send(msg); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.stopping:
			return nil
		case <-drainChanged:
		case <-changed:
		case <-loadChanged:
		case <-lentEmptied:
		case <-tick.C:
		}
	}
}

func (s *Service) snapshot(log *kvcache.EventLog) ([]uint64, uint64) {
	if sn, ok := s.eng.(Snapshotter); ok {
		snap := sn.Snapshot()
		hashes := make([]uint64, len(snap.Blocks))
		for i, b := range snap.Blocks {
			hashes[i] = b.Hash
		}
		return hashes, snap.LastEventID
	}
	return nil, log.LastID()
}

func eventProto(ev kvcache.Event) *workerv1.KVEvent {
	p := &workerv1.KVEvent{Id: ev.ID}
	switch ev.Kind {
	case kvcache.Stored:
		p.Kind = &workerv1.KVEvent_Stored{Stored: &workerv1.BlockStored{ParentHash: ev.Parent, BlockHashes: ev.Hashes}}
	case kvcache.Removed:
		p.Kind = &workerv1.KVEvent_Removed{Removed: &workerv1.BlockRemoved{BlockHashes: ev.Hashes}}
	case kvcache.Cleared:
		p.Kind = &workerv1.KVEvent_Cleared{Cleared: &workerv1.AllBlocksCleared{}}
	}
	return p
}

// loadProto is the engine's load, and the prefill service's queue, as the
// protos carry them.
func (s *Service) loadProto() *workerv1.Load {
	l := engineLoad(s.eng.Stats())
	if s.lent != nil {
		l.LentWaitingTokens = s.lent.QueuedTokens()
	}
	return l
}

func engineLoad(st engine.Stats) *workerv1.Load {
	return &workerv1.Load{
		RunningSequences: uint32(st.Running), WaitingSequences: uint32(st.Waiting),
		WaitingTokens: uint64(st.WaitingTokens), FreeBlocks: uint32(st.FreeBlocks + st.CachedBlocks),
		TotalBlocks: uint32(st.TotalBlocks), ActiveBlocks: uint32(st.ActiveBlocks),
	}
}
