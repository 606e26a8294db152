package router_test

import (
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	"github.com/tandem-serve/tandem/proto/tandem/router/v1/routerv1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/router"
)

// watchFleet opens WatchFleet on r through Connect's client or grpc-go's, and
// returns its next-message function.
func watchFleet(t *testing.T, r *router.Router, kind string) func() (*routerv1.WatchFleetResponse, error) {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(routerv1connect.NewRouterServiceHandler(r))
	srv := rpctest.NewServer(t, mux)
	ctx := rpctest.Context(t)
	if kind == "grpc" {
		s, err := routerv1.NewRouterServiceClient(rpctest.GRPCConn(t, srv)).WatchFleet(ctx, &routerv1.WatchFleetRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return s.Recv
	}
	s, err := routerv1connect.NewRouterServiceClient(rpctest.Client(t), srv.URL).WatchFleet(ctx, connect.NewRequest(&routerv1.WatchFleetRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return func() (*routerv1.WatchFleetResponse, error) {
		if s.Receive() {
			return s.Msg(), nil
		}
		if err := s.Err(); err != nil {
			return nil, err
		}
		return nil, io.EOF
	}
}

// nextUntil reads the stream until ok says a message shows what the test waits
// for; the test's context bounds the wait.
func nextUntil(t *testing.T, recv func() (*routerv1.WatchFleetResponse, error), what string,
	ok func(*routerv1.WatchFleetResponse) bool) *routerv1.WatchFleetResponse {
	t.Helper()
	for {
		msg, err := recv()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok(msg) {
			return msg
		}
	}
}

func fleetWorker(msg *routerv1.WatchFleetResponse, id string) *routerv1.FleetWorker {
	for _, w := range msg.GetWorkers() {
		if w.GetWorker().GetId() == id {
			return w
		}
	}
	return nil
}

// The fleet stream shows each worker as its own event stream reports it (load,
// cached blocks, prefill policy, draining), with the router's parameters in force,
// and follows changes: a drain, new parameters, a worker leaving. Stop ends it.
func TestWatchFleetFollowsTheWorkers(t *testing.T) {
	for _, kind := range []string{"connect", "grpc"} {
		t.Run(kind, func(t *testing.T) {
			r, err := router.New(router.Config{BlockSize: 16, Params: router.DefaultParams()}, rand.New(rand.NewPCG(1, 2)), prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			policy := &workerv1.PrefillPolicy{Policy: "threshold", ShortPrefillThreshold: 128, ItlWeight: 0.25}
			load := &workerv1.Load{RunningSequences: 2, WaitingSequences: 1, FreeBlocks: 60, TotalBlocks: 100, ActiveBlocks: 40}
			if err := r.Update(decodeA, &workerv1.WatchEventsResponse{Incarnation: "1", Snapshot: &workerv1.Snapshot{BlockHashes: []uint64{1, 2, 3}},
				Load: load, PrefillPolicy: policy}); err != nil {
				t.Fatal(err)
			}
			join(t, r, prefillP, &workerv1.Load{WaitingTokens: 300, TotalBlocks: 50, FreeBlocks: 50}, 7)
			blind := router.Worker{ID: "gpu-z", Address: "10.0.0.9:7001", Mode: workerv1.WorkerMode_WORKER_MODE_AGGREGATED, NoKVEvents: true}
			join(t, r, blind, &workerv1.Load{TotalBlocks: 10, FreeBlocks: 10})
			recv := watchFleet(t, r, kind)

			first, err := recv()
			if err != nil {
				t.Fatal(err)
			}
			if n := len(first.GetWorkers()); n != 3 || first.GetBlockSize() != 16 || first.GetIndexBlocks() != 4 {
				t.Fatalf("first message: %d workers, block size %d, %d index blocks; want 3, 16, 4", n, first.GetBlockSize(), first.GetIndexBlocks())
			}
			if z := fleetWorker(first, blind.ID); !z.GetNoKvEvents() || fleetWorker(first, decodeA.ID).GetNoKvEvents() {
				t.Errorf("an engine without KV events: %v; want it said, and only of it", z)
			}
			a := fleetWorker(first, decodeA.ID)
			if a == nil || a.GetWorker().GetAddress() != decodeA.Address || a.GetIndexedBlocks() != 3 || !a.GetSynced() ||
				a.GetLoad().GetActiveBlocks() != 40 || a.GetLoad().GetRunningSequences() != 2 || a.GetPrefillPolicy().GetShortPrefillThreshold() != 128 {
				t.Errorf("decode worker in the fleet view: %v", a)
			}
			if p := fleetWorker(first, prefillP.ID); p.GetLoad().GetWaitingTokens() != 300 || p.GetIndexedBlocks() != 1 || p.GetPrefillPolicy() != nil {
				t.Errorf("prefill worker in the fleet view: %v", p)
			}
			if p := first.GetParams(); p.GetPrefillWeight() != 1 || p.GetIslThreshold() != 1024 || p.GetIslThresholdInForce() != 1024 || p.GetIslGate() ||
				p.GetIslItlWeight() != router.DefaultParams().ISLITLWeight {
				t.Errorf("params %v, want the defaults", p)
			}

			drain(t, r, decodeA, true)
			nextUntil(t, recv, "the drain", func(m *routerv1.WatchFleetResponse) bool { return fleetWorker(m, decodeA.ID).GetWorker().GetDraining() })

			p := router.DefaultParams()
			p.ISLGate, p.ISLThreshold, p.QueueWeight, p.ISLITLWeight = true, 300, 2.5, 0.75
			if err := r.SetParams(p); err != nil {
				t.Fatal(err)
			}
			nextUntil(t, recv, "new params", func(m *routerv1.WatchFleetResponse) bool {
				return m.GetParams().GetIslGate() && m.GetParams().GetIslThresholdInForce() == 300 && m.GetParams().GetQueueWeight() == 2.5 &&
					m.GetParams().GetIslItlWeight() == 0.75
			})

			r.Leave(prefillP)
			nextUntil(t, recv, "the prefill worker leaving", func(m *routerv1.WatchFleetResponse) bool { return len(m.GetWorkers()) == 2 })

			r.Stop()
			for {
				if _, err := recv(); err != nil {
					if !errors.Is(err, io.EOF) {
						t.Errorf("after Stop the stream ended with %v, want a clean end", err)
					}
					break
				}
			}
		})
	}
}
