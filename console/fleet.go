package console

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc"

	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
)

// FleetSource is the router's fleet stream, as grpc-go's RouterServiceClient
// offers it.
type FleetSource interface {
	WatchFleet(ctx context.Context, in *routerv1.WatchFleetRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[routerv1.WatchFleetResponse], error)
}

// FollowFleet keeps one subscription to the router's fleet stream open until ctx
// ends, whatever number of pages watch: each message is told to all of them. While
// the router cannot be reached the pages are told so, with the last fleet known.
func (c *Console) FollowFleet(ctx context.Context, src FleetSource) {
	backoff := 250 * time.Millisecond
	down := ""
	for ctx.Err() == nil {
		err := c.followOnce(ctx, src, &backoff)
		if ctx.Err() != nil {
			return
		}
		msg := "fleet stream: " + err.Error()
		if msg != down {
			c.log.Warn("console: the router's fleet stream ended; retrying", "error", err)
			down = msg
		}
		c.setDisconnected(msg)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (c *Console) followOnce(ctx context.Context, src FleetSource, backoff *time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := src.WatchFleet(ctx, &routerv1.WatchFleetRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			return err
		}
		*backoff = 250 * time.Millisecond
		c.setFleet(fleetOf(msg))
	}
}

func (c *Console) setFleet(f Fleet) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fleet = f
	c.publish(frame("fleet", f))
}

func (c *Console) setDisconnected(why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fleet.Connected, c.fleet.Error, c.fleet.Time = false, why, time.Now().UnixMilli()
	c.publish(frame("fleet", c.fleet))
}

// fleetOf is the router's fleet view as the page reads it.
func fleetOf(m *routerv1.WatchFleetResponse) Fleet {
	f := Fleet{
		Time: time.Now().UnixMilli(), Connected: true, BlockSize: int(m.GetBlockSize()), IndexBlocks: m.GetIndexBlocks(),
		Workers: make([]Worker, 0, len(m.GetWorkers())),
	}
	if p := m.GetParams(); p != nil {
		f.Router = &RouterPolicy{
			PrefillWeight: p.GetPrefillWeight(), QueueWeight: p.GetQueueWeight(), Temperature: p.GetTemperature(),
			ISLGate: p.GetIslGate(), ISLThreshold: p.GetIslThreshold(), ISLAdaptive: p.GetIslAdaptive(),
			ISLMin: p.GetIslMin(), ISLMax: p.GetIslMax(), ISLThresholdInForce: p.GetIslThresholdInForce(),
			LendersPrefillFirst: p.GetLendersPrefillFirst(),
		}
	}
	for _, fw := range m.GetWorkers() {
		w, l := fw.GetWorker(), fw.GetLoad()
		out := Worker{
			ID: w.GetId(), Mode: strings.ToLower(strings.TrimPrefix(w.GetMode().String(), "WORKER_MODE_")), Address: w.GetAddress(),
			Draining: w.GetDraining(), Reported: l != nil,
			Running: l.GetRunningSequences(), Waiting: l.GetWaitingSequences(), WaitingTokens: l.GetWaitingTokens(),
			KVTotalBlocks: l.GetTotalBlocks(), CachedBlocks: fw.GetIndexedBlocks(), Synced: fw.GetSynced(), Routed: fw.GetRouted(),
			NoKVEvents: fw.GetNoKvEvents(), Lending: fw.GetWithheldFromDecode(), Role: fw.GetRole(),
		}
		if total, free := l.GetTotalBlocks(), l.GetFreeBlocks(); total > 0 {
			// Free counts evictable cached blocks too: used is what requests hold.
			out.KVUsedBlocks = total - min(free, total)
			out.KVUsage = round3(float64(out.KVUsedBlocks) / float64(total))
		}
		if p := fw.GetPrefillPolicy(); p != nil {
			out.PrefillPolicy = &DecodePolicy{
				Policy: p.GetPolicy(), ShortPrefillThreshold: p.GetShortPrefillThreshold(), ITLWeight: p.GetItlWeight(),
				EnforceDisagg: p.GetEnforceDisagg(), MaxPrefillQueueTokens: p.GetMaxPrefillQueueTokens(),
			}
		}
		f.Workers = append(f.Workers, out)
	}
	f.Planner = plannerOf(m.GetPlanner())
	return f
}

func plannerOf(v *routerv1.PlannerView) *Planner {
	if v == nil {
		return nil
	}
	p := &Planner{
		Source: v.GetSource(), Decided: v.GetDecidedUnixMs(), Reason: v.GetReason(),
		PrefillWorkers: v.GetPrefillWorkers(), DecodeWorkers: v.GetDecodeWorkers(), ISLThreshold: v.GetIslThreshold(),
		Roles: v.GetRoles(), Pinned: v.GetPinned(),
		ArrivalRate: round3(v.GetArrivalRate()), ProjectedCapacity: round3(v.GetProjectedCapacity()), BestCapacity: round3(v.GetBestCapacity()),
		Switches: make([]PlannerSwitch, 0, len(v.GetSwitches())),
	}
	if p.Roles == nil {
		p.Roles = map[string]string{}
	}
	if pin := v.GetPin(); pin != nil {
		p.Pin = &PlannerPin{Current: pin.GetCurrent(), Prefill: pin.GetPrefill(), ISLThreshold: pin.GetIslThreshold()}
	}
	for _, s := range v.GetSwitches() {
		roles := s.GetRoles()
		if roles == nil {
			roles = map[string]string{}
		}
		p.Switches = append(p.Switches, PlannerSwitch{Time: s.GetAtUnixMs(), Reason: s.GetReason(), Roles: roles,
			ISLThreshold: s.GetIslThreshold(), Pinned: s.GetPinned()})
	}
	return p
}
