package frontendsvc

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tandem-serve/tandem/internal/h2ctest"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	"github.com/tandem-serve/tandem/proto/tandem/decode/v1/decodev1connect"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
)

// fakeDecode is a decode worker that is either full or answers with one token.
type fakeDecode struct {
	decodev1connect.UnimplementedDecodeServiceHandler
	id   string
	full bool

	mu   sync.Mutex
	last *decodev1.GenerateRequest
}

func (d *fakeDecode) Generate(_ context.Context, req *connect.Request[decodev1.GenerateRequest], out *connect.ServerStream[decodev1.GenerateResponse]) error {
	d.mu.Lock()
	d.last = req.Msg
	d.mu.Unlock()
	if d.full {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("decode worker %s is at capacity (1 requests)", d.id))
	}
	return out.Send(&decodev1.GenerateResponse{TokenIds: []uint32{7}})
}

// fakeRouter routes to the first worker not excluded, in order, and says what the
// real router says when none is left.
type fakeRouter struct {
	routerv1.RouterServiceClient
	workers []*routerv1.Worker
	prefill []*routerv1.RankedWorker

	mu       sync.Mutex
	excluded [][]string
}

func (r *fakeRouter) Route(_ context.Context, in *routerv1.RouteRequest, _ ...grpc.CallOption) (*routerv1.RouteResponse, error) {
	r.mu.Lock()
	r.excluded = append(r.excluded, slices.Clone(in.GetExcludeWorkerIds()))
	r.mu.Unlock()
	for _, w := range r.workers {
		if !slices.Contains(in.GetExcludeWorkerIds(), w.GetId()) {
			return &routerv1.RouteResponse{DecodeWorker: w, PrefillWorkers: r.prefill}, nil
		}
	}
	return nil, status.Error(codes.Unavailable, "no decode worker is available")
}

func serveDecode(t *testing.T, d *fakeDecode) *routerv1.Worker {
	mux := http.NewServeMux()
	mux.Handle(decodev1connect.NewDecodeServiceHandler(d))
	return &routerv1.Worker{Id: d.id, Address: h2ctest.Addr(h2ctest.NewServer(t, mux))}
}

// deadAddr is an address nothing listens on.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func newTestBackend(t *testing.T, r *fakeRouter) *backend {
	b := &backend{router: r, conns: map[string]*grpc.ClientConn{},
		dial: func(addr string) (*grpc.ClientConn, error) {
			return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		}}
	b.setModel("test", 16)
	t.Cleanup(b.close)
	return b
}

func generate(t *testing.T, b *backend) (*routerv1.RouteResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, route, err := b.Generate(ctx, &decodev1.GenerateRequest{RequestId: "r1", PromptTokenIds: []uint32{1, 2, 3}, MaxTokens: 4})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	first, err := s.Recv()
	if err != nil || !slices.Equal(first.GetTokenIds(), []uint32{7}) {
		t.Errorf("first message %v, %v; want token 7", first, err)
	}
	return route, nil
}

// TestBackendRetriesAnotherWorker: a decode worker that is full or unreachable
// before it takes the request costs one re-route, not an error.
func TestBackendRetriesAnotherWorker(t *testing.T) {
	ok := serveDecode(t, &fakeDecode{id: "ok"})
	for _, first := range []*routerv1.Worker{
		serveDecode(t, &fakeDecode{id: "full", full: true}),
		{Id: "dead", Address: deadAddr(t)},
	} {
		t.Run(first.GetId(), func(t *testing.T) {
			r := &fakeRouter{workers: []*routerv1.Worker{first, ok}}
			route, err := generate(t, newTestBackend(t, r))
			if err != nil {
				t.Fatalf("with %s first and ok second: %v", first.GetId(), err)
			}
			if route.GetDecodeWorker().GetId() != "ok" {
				t.Errorf("served by %s, want ok", route.GetDecodeWorker().GetId())
			}
			if len(r.excluded) != 2 || !slices.Equal(r.excluded[1], []string{first.GetId()}) {
				t.Errorf("routes asked with exclusions %v, want [] then [%s]", r.excluded, first.GetId())
			}
		})
	}
}

// TestBackendFullOnlyWorker: when the only decode worker is full, the client hears
// that it is at capacity (ResourceExhausted, a 429), not that there is no worker.
func TestBackendFullOnlyWorker(t *testing.T) {
	r := &fakeRouter{workers: []*routerv1.Worker{serveDecode(t, &fakeDecode{id: "full", full: true})}}
	_, err := generate(t, newTestBackend(t, r))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "at capacity") {
		t.Errorf("only worker full: %v, want ResourceExhausted saying it is at capacity", err)
	}

	// The only worker unreachable: the router's answer, not a dial error naming an
	// internal address.
	r = &fakeRouter{workers: []*routerv1.Worker{{Id: "dead", Address: deadAddr(t)}}}
	_, err = generate(t, newTestBackend(t, r))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no decode worker") {
		t.Errorf("only worker unreachable: %v, want the router's Unavailable", err)
	}

	// With no worker at all the router's own answer stands.
	_, err = generate(t, newTestBackend(t, &fakeRouter{}))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no decode worker") {
		t.Errorf("no worker: %v, want the router's Unavailable", err)
	}
}

// TestBackendPassesPrefillRanking: the decode worker gets the router's prefill
// ranking with the terms it needs to re-rank on the router's weights.
func TestBackendPassesPrefillRanking(t *testing.T) {
	d := &fakeDecode{id: "ok"}
	r := &fakeRouter{workers: []*routerv1.Worker{serveDecode(t, d)}, prefill: []*routerv1.RankedWorker{
		{Worker: &routerv1.Worker{Id: "p1"}, CachedBlocks: 3, QueuedTokens: 40, Cost: 7.5, QueueCostPerToken: 0.0625},
		{Worker: &routerv1.Worker{Id: "p2"}, Cost: 9},
	}}
	if _, err := generate(t, newTestBackend(t, r)); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	got := d.last.GetPrefillWorkers()
	if len(got) != 2 || got[0].GetWorkerId() != "p1" || got[0].GetCachedBlocks() != 3 || got[0].GetQueuedTokens() != 40 ||
		got[0].GetCost() != 7.5 || got[0].GetQueueCostPerToken() != 0.0625 || got[1].GetWorkerId() != "p2" || got[1].GetCost() != 9 {
		t.Errorf("decode worker got prefill candidates %v, want p1 (3 cached, 40 queued, cost 7.5, 0.0625 a token) then p2 (cost 9)", got)
	}
}
