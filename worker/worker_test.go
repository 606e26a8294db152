package worker_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"

	"github.com/tandem-serve/tandem/engine/sim"
	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	"github.com/tandem-serve/tandem/kvcache"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/proto/tandem/worker/v1/workerv1connect"
	"github.com/tandem-serve/tandem/worker"
)

const (
	workerID    = "prefill-w1"
	incarnation = "inc-1"
	version     = "v-test"
)

// watchStream is an open WatchEvents stream from either client.
type watchStream interface {
	recv() (*workerv1.WatchEventsResponse, error)
}

type client struct {
	name  string
	info  func(ctx context.Context) (*workerv1.InfoResponse, error)
	watch func(ctx context.Context, req *workerv1.WatchEventsRequest) (watchStream, error)
}

type connectStream struct {
	s *connect.ServerStreamForClient[workerv1.WatchEventsResponse]
}

func (c connectStream) recv() (*workerv1.WatchEventsResponse, error) {
	if c.s.Receive() {
		return c.s.Msg(), nil
	}
	if err := c.s.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("stream ended")
}

type grpcStream struct {
	s grpc.ServerStreamingClient[workerv1.WatchEventsResponse]
}

func (g grpcStream) recv() (*workerv1.WatchEventsResponse, error) { return g.s.Recv() }

// newSim is a sim engine that takes no time, closed when the test ends.
func newSim(t *testing.T) *sim.Engine {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.TimeScale = 0
	eng, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	return eng
}

func start(t *testing.T) (*sim.Engine, []client) {
	t.Helper()
	eng := newSim(t)
	svc := worker.New(workerID, incarnation, workerv1.WorkerMode_WORKER_MODE_PREFILL, version, eng)
	svc.Heartbeat = 20 * time.Millisecond

	mux := http.NewServeMux()
	mux.Handle(workerv1connect.NewWorkerServiceHandler(svc))
	srv := rpctest.NewServer(t, mux)
	cc := workerv1connect.NewWorkerServiceClient(rpctest.Client(t), srv.URL)
	gc := workerv1.NewWorkerServiceClient(rpctest.GRPCConn(t, srv))

	return eng, []client{
		{
			name: "connect",
			info: func(ctx context.Context) (*workerv1.InfoResponse, error) {
				resp, err := cc.Info(ctx, connect.NewRequest(&workerv1.InfoRequest{}))
				if err != nil {
					return nil, err
				}
				return resp.Msg, nil
			},
			watch: func(ctx context.Context, req *workerv1.WatchEventsRequest) (watchStream, error) {
				s, err := cc.WatchEvents(ctx, connect.NewRequest(req))
				if err != nil {
					return nil, err
				}
				t.Cleanup(func() { _ = s.Close() })
				return connectStream{s}, nil
			},
		},
		{
			name: "grpc",
			info: func(ctx context.Context) (*workerv1.InfoResponse, error) {
				return gc.Info(ctx, &workerv1.InfoRequest{})
			},
			watch: func(ctx context.Context, req *workerv1.WatchEventsRequest) (watchStream, error) {
				s, err := gc.WatchEvents(ctx, req)
				if err != nil {
					return nil, err
				}
				return grpcStream{s}, nil
			},
		},
	}
}

func TestInfo(t *testing.T) {
	eng, clients := start(t)
	want := eng.Info()
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			resp, err := c.info(rpctest.Context(t))
			if err != nil {
				t.Fatal(err)
			}
			info := resp.GetInfo()
			if info.GetId() != workerID || info.GetMode() != workerv1.WorkerMode_WORKER_MODE_PREFILL || info.GetVersion() != version {
				t.Errorf("id %q mode %v version %q, want %q PREFILL %q", info.GetId(), info.GetMode(), info.GetVersion(), workerID, version)
			}
			if info.GetEngine() != "sim" || info.GetModel() != want.Model || int(info.GetTotalBlocks()) != want.TotalBlocks {
				t.Errorf("engine %q model %q blocks %d, want sim %q %d", info.GetEngine(), info.GetModel(), info.GetTotalBlocks(), want.Model, want.TotalBlocks)
			}
			l := info.GetLayout()
			wl := want.Layout
			if int(l.GetLayers()) != wl.Layers || int(l.GetKvHeads()) != wl.KVHeads || int(l.GetHeadDim()) != wl.HeadDim ||
				int(l.GetBlockSize()) != wl.BlockSize || int(l.GetBlockBytes()) != wl.BlockBytes ||
				l.GetModelFingerprint() != wl.Fingerprint || l.GetDtype() != workerv1.KVDtype_KV_DTYPE_F32 {
				t.Errorf("layout %v, engine has %+v", l, wl)
			}
			if int(resp.GetLoad().GetTotalBlocks()) != want.TotalBlocks || int(resp.GetLoad().GetFreeBlocks()) != want.TotalBlocks {
				t.Errorf("idle load %v, want every one of %d blocks free", resp.GetLoad(), want.TotalBlocks)
			}
		})
	}
}

// recvUntil reads until a message satisfies ok, failing after a bounded wait.
func recvUntil(t *testing.T, s watchStream, what string, ok func(*workerv1.WatchEventsResponse) bool) *workerv1.WatchEventsResponse {
	t.Helper()
	for range 500 { // at 20ms a heartbeat, ten seconds
		msg, err := s.recv()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok(msg) {
			return msg
		}
	}
	t.Fatalf("no %s in 500 messages", what)
	return nil
}

func TestWatchEventsSnapshotHeartbeatAndEvents(t *testing.T) {
	eng, clients := start(t)
	var lastID uint64
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			s, err := c.watch(rpctest.Context(t), &workerv1.WatchEventsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			first, err := s.recv()
			if err != nil {
				t.Fatal(err)
			}
			if first.GetSnapshot() == nil {
				t.Fatal("first message has no snapshot")
			}
			if first.GetSnapshot().GetLastEventId() != lastID {
				t.Errorf("snapshot at event %d, log is at %d", first.GetSnapshot().GetLastEventId(), lastID)
			}
			if first.GetLoad() == nil || int(first.GetLoad().GetTotalBlocks()) != eng.Info().TotalBlocks {
				t.Errorf("first message load %v", first.GetLoad())
			}
			if first.GetIncarnation() != incarnation {
				t.Errorf("incarnation %q, want %q", first.GetIncarnation(), incarnation)
			}
			// Nothing happens: a heartbeat still comes, with the load and no snapshot.
			hb, err := s.recv()
			if err != nil {
				t.Fatalf("no heartbeat: %v", err)
			}
			if hb.GetSnapshot() != nil || len(hb.GetEvents()) != 0 || hb.GetLoad() == nil || hb.GetIncarnation() != incarnation {
				t.Errorf("heartbeat %v, want load only", hb)
			}

			// An event is delivered with its id, kind and hashes.
			id := eng.Events().Append(kvcache.Stored, 77, []uint64{101, 102})
			lastID = id
			msg := recvUntil(t, s, "the stored event", func(m *workerv1.WatchEventsResponse) bool { return len(m.GetEvents()) > 0 })
			if msg.GetSnapshot() != nil {
				t.Errorf("snapshot sent again to a subscriber that is keeping up")
			}
			if len(msg.GetEvents()) != 1 {
				t.Fatalf("got events %v, want exactly the one appended", msg.GetEvents())
			}
			ev := msg.GetEvents()[0]
			if ev.GetId() != id || ev.GetStored().GetParentHash() != 77 || !slices.Equal(ev.GetStored().GetBlockHashes(), []uint64{101, 102}) {
				t.Errorf("event %v, want id %d stored parent 77 hashes [101 102]", ev, id)
			}
		})
	}

	// Resuming after an event id sends only what came after, without a snapshot.
	a := eng.Events().Append(kvcache.Removed, 0, []uint64{101})
	b := eng.Events().Append(kvcache.Cleared, 0, nil)
	for _, c := range clients {
		t.Run(c.name+"/resume", func(t *testing.T) {
			s, err := c.watch(rpctest.Context(t), &workerv1.WatchEventsRequest{AfterEventId: a - 1})
			if err != nil {
				t.Fatal(err)
			}
			msg, err := s.recv()
			if err != nil {
				t.Fatal(err)
			}
			if msg.GetSnapshot() != nil {
				t.Errorf("snapshot sent to a subscriber the ring still covers")
			}
			evs := msg.GetEvents()
			if len(evs) != 2 || evs[0].GetId() != a || evs[1].GetId() != b ||
				!slices.Equal(evs[0].GetRemoved().GetBlockHashes(), []uint64{101}) || evs[1].GetCleared() == nil {
				t.Fatalf("resumed after %d: events %v, want removed %d then cleared %d", a-1, evs, a, b)
			}
		})
		t.Run(c.name+"/future_id", func(t *testing.T) {
			// An id the log never issued (another incarnation's) needs a snapshot.
			s, err := c.watch(rpctest.Context(t), &workerv1.WatchEventsRequest{AfterEventId: b + 1000})
			if err != nil {
				t.Fatal(err)
			}
			msg, err := s.recv()
			if err != nil {
				t.Fatal(err)
			}
			if msg.GetSnapshot() == nil || msg.GetSnapshot().GetLastEventId() != b {
				t.Fatalf("after unknown id: snapshot %v, want one at event %d", msg.GetSnapshot(), b)
			}
		})
	}
}

func TestWatchEventsAfterRingWrapped(t *testing.T) {
	eng, clients := start(t)
	first := eng.Events().Append(kvcache.Stored, 0, []uint64{1})
	for i := range 5000 { // the sim's ring holds 4096
		eng.Events().Append(kvcache.Stored, 0, []uint64{uint64(i + 2)})
	}
	last := eng.Events().LastID()
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			s, err := c.watch(rpctest.Context(t), &workerv1.WatchEventsRequest{AfterEventId: first})
			if err != nil {
				t.Fatal(err)
			}
			msg, err := s.recv()
			if err != nil {
				t.Fatal(err)
			}
			if msg.GetSnapshot() == nil || msg.GetSnapshot().GetLastEventId() != last {
				t.Fatalf("subscriber behind the ring got snapshot %v and %d events, want a snapshot at %d", msg.GetSnapshot(), len(msg.GetEvents()), last)
			}
			if len(msg.GetEvents()) != 0 {
				t.Errorf("%d events sent alongside a snapshot that already covers them", len(msg.GetEvents()))
			}
		})
	}
}
