package router

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// WatchFleet's pace: a change is sent after at most fleetGap (so that a burst of
// KV events costs one message, not hundreds), and a message goes out at least
// every fleetHeartbeat (routed counts and the adaptive threshold change without
// notice).
const (
	fleetGap       = 200 * time.Millisecond
	fleetHeartbeat = time.Second
)

// WatchFleet streams the router's view of its workers and its parameters: what an
// operator's console shows. Each message is the whole view.
func (r *Router) WatchFleet(ctx context.Context, _ *connect.Request[routerv1.WatchFleetRequest],
	stream *connect.ServerStream[routerv1.WatchFleetResponse]) error {
	heartbeat := time.NewTicker(fleetHeartbeat)
	defer heartbeat.Stop()
	for {
		view, changed := r.fleetView()
		if err := stream.Send(view); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.stopping:
			return nil
		case <-heartbeat.C:
			continue
		case <-changed:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.stopping:
			return nil
		case <-time.After(fleetGap):
		}
	}
}

// Stop ends every WatchFleet stream, so that watchers (which never hang up on
// their own) do not hold the router's shutdown for its whole grace period.
func (r *Router) Stop() { r.stopOnce.Do(func() { close(r.stopping) }) }

// fleetView is the fleet as WatchFleet sends it, and a channel closed at the next
// change.
func (r *Router) fleetView() (*routerv1.WatchFleetResponse, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.params
	view := &routerv1.WatchFleetResponse{
		BlockSize:   uint32(r.blockSize),
		IndexBlocks: uint64(r.ix.Blocks()),
		Params: &routerv1.RoutingParams{
			PrefillWeight: p.PrefillWeight, QueueWeight: p.QueueWeight, Temperature: p.Temperature,
			IslGate: p.ISLGate, IslThreshold: uint32(p.ISLThreshold), IslThresholdInForce: uint32(r.threshold),
			IslAdaptive: p.ISLAdaptive, IslMin: uint32(p.ISLMin), IslMax: uint32(p.ISLMax), IslItlWeight: p.ISLITLWeight,
			LendersPrefillFirst: p.LendersPrefillFirst,
		},
	}
	for _, st := range r.order {
		view.Workers = append(view.Workers, &routerv1.FleetWorker{
			Worker: workerProto(st.w), Load: st.load, IndexedBlocks: uint32(r.ix.Held(st.ref)), Synced: st.synced,
			Routed: st.routedTotal, PrefillPolicy: st.policy, NoKvEvents: st.w.NoKVEvents,
			WithheldFromDecode: st.withheld, Role: string(r.lenderRole(st)),
		})
	}
	view.Planner = r.plannerView
	if r.fleetChanged == nil {
		r.fleetChanged = make(chan struct{})
	}
	return view, r.fleetChanged
}

// fleetChange wakes the WatchFleet streams; r.mu is held. Without watchers there
// is no channel, and an update costs nothing here.
func (r *Router) fleetChange() {
	if r.fleetChanged != nil {
		close(r.fleetChanged)
		r.fleetChanged = nil
	}
}

// noteFleet records what of msg the fleet view shows and wakes its watchers when
// any of it changed; r.mu is held. A heartbeat that repeats the last load is no
// change.
func (r *Router) noteFleet(st *state, msg *workerv1.WatchEventsResponse, before Worker, beforeLoad *workerv1.Load) {
	prev := st.policy
	if p := msg.GetPrefillPolicy(); p != nil {
		st.policy = p
	}
	if r.fleetChanged == nil {
		// No one watches: the comparisons below (by reflection, under the lock
		// Route takes) would decide nothing.
		return
	}
	changed := before != st.w || len(msg.GetEvents()) > 0 || msg.GetSnapshot() != nil ||
		st.policy != prev && !proto.Equal(st.policy, prev) ||
		st.load != beforeLoad && !proto.Equal(st.load, beforeLoad)
	if changed {
		r.fleetChange()
	}
}
