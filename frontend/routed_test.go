package frontend

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	"github.com/tandem-serve/tandem/proto/tandem/decode/v1/decodev1connect"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// fakeDecode is a decode worker that is either full or answers with one token.
type fakeDecode struct {
	decodev1connect.UnimplementedDecodeServiceHandler
	id   string
	full bool
	shed bool // refuses every request as its TTFT unmeetable, with the ErrorInfo

	mu   sync.Mutex
	last *decodev1.GenerateRequest
	// refuse is how many offers it refuses as full before it has room.
	refuse, offers int
}

func (d *fakeDecode) Generate(_ context.Context, req *connect.Request[decodev1.GenerateRequest], out *connect.ServerStream[decodev1.GenerateResponse]) error {
	d.mu.Lock()
	d.last = req.Msg
	d.offers++
	full := d.full || d.offers <= d.refuse
	d.mu.Unlock()
	if d.shed {
		ce := connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("decode worker %s refuses the request: TTFT unmeetable", d.id))
		detail, _ := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: reasonShed, Domain: decodeErrorDomain})
		ce.AddDetail(detail)
		return ce
	}
	if full {
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
	return &routerv1.Worker{Id: d.id, Address: rpctest.Addr(rpctest.NewServer(t, mux))}
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

// newTestBackend routes with r and dials decode workers in cleartext, once each.
func newTestBackend(t *testing.T, r *fakeRouter) *Routed {
	var mu sync.Mutex
	conns := map[string]*grpc.ClientConn{}
	t.Cleanup(func() {
		for _, cc := range conns {
			_ = cc.Close()
		}
	})
	b := NewRouted(r, func(addr string) (decodev1.DecodeServiceClient, error) {
		mu.Lock()
		defer mu.Unlock()
		if cc, ok := conns[addr]; ok {
			return decodev1.NewDecodeServiceClient(cc), nil
		}
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		conns[addr] = cc
		return decodev1.NewDecodeServiceClient(cc), nil
	})
	b.SetModel("test", 16)
	return b
}

func routedGenerate(t *testing.T, b *Routed) (*routerv1.RouteResponse, error) {
	return routedGenerateReq(t, b, &decodev1.GenerateRequest{RequestId: "r1", PromptTokenIds: []uint32{1, 2, 3}, MaxTokens: 4})
}

func routedGenerateReq(t *testing.T, b *Routed, req *decodev1.GenerateRequest) (*routerv1.RouteResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, route, err := b.Generate(ctx, req)
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

// TestRoutedRetriesAnotherWorker: a decode worker that is full or unreachable
// before it takes the request costs one re-route, not an error.
func TestRoutedRetriesAnotherWorker(t *testing.T) {
	ok := serveDecode(t, &fakeDecode{id: "ok"})
	for _, first := range []*routerv1.Worker{
		serveDecode(t, &fakeDecode{id: "full", full: true}),
		{Id: "dead", Address: deadAddr(t)},
	} {
		t.Run(first.GetId(), func(t *testing.T) {
			r := &fakeRouter{workers: []*routerv1.Worker{first, ok}}
			route, err := routedGenerate(t, newTestBackend(t, r))
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

// TestRoutedFullOnlyWorker: when the only decode worker is full, the client hears
// that it is at capacity (ResourceExhausted, a 429), not that there is no worker.
func TestRoutedFullOnlyWorker(t *testing.T) {
	r := &fakeRouter{workers: []*routerv1.Worker{serveDecode(t, &fakeDecode{id: "full", full: true})}}
	_, err := routedGenerate(t, newTestBackend(t, r))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "at capacity") {
		t.Errorf("only worker full: %v, want ResourceExhausted saying it is at capacity", err)
	}

	// Every worker full (decode workers refusing on load, --max-kv-usage): the
	// request is tried on MaxDecodeAttempts of them, then the client hears their
	// refusals, a 429, never the router's "no worker" or an internal error.
	r = &fakeRouter{workers: []*routerv1.Worker{serveDecode(t, &fakeDecode{id: "full-1", full: true}),
		serveDecode(t, &fakeDecode{id: "full-2", full: true}), serveDecode(t, &fakeDecode{id: "full-3", full: true}),
		serveDecode(t, &fakeDecode{id: "full-4", full: true})}}
	_, err = routedGenerate(t, newTestBackend(t, r))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "3 refused it") ||
		!strings.Contains(err.Error(), "full-3 is at capacity") || strings.Contains(err.Error(), "full-4") {
		t.Errorf("every worker full: %v, want ResourceExhausted naming the three workers tried", err)
	}
	if want := [][]string{{}, {"full-1"}, {"full-1", "full-2"}}; !slices.EqualFunc(r.excluded, want, slices.Equal) {
		t.Errorf("routes asked with exclusions %v, want %v", r.excluded, want)
	}

	// The only worker unreachable: the router's answer, not a dial error naming an
	// internal address.
	r = &fakeRouter{workers: []*routerv1.Worker{{Id: "dead", Address: deadAddr(t)}}}
	_, err = routedGenerate(t, newTestBackend(t, r))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no decode worker") {
		t.Errorf("only worker unreachable: %v, want the router's Unavailable", err)
	}

	// With no worker at all the router's own answer stands.
	_, err = routedGenerate(t, newTestBackend(t, &fakeRouter{}))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no decode worker") {
		t.Errorf("no worker: %v, want the router's Unavailable", err)
	}
}

// TestRoutedTriesAThirdWorker: with two workers full (or one full, one
// unreachable), the request still reaches the third, which has room; before, the
// client got a 429 after two.
func TestRoutedTriesAThirdWorker(t *testing.T) {
	ok := serveDecode(t, &fakeDecode{id: "ok"})
	full1 := serveDecode(t, &fakeDecode{id: "full-1", full: true})
	for _, second := range []*routerv1.Worker{
		serveDecode(t, &fakeDecode{id: "full-2", full: true}),
		{Id: "dead", Address: deadAddr(t)},
	} {
		r := &fakeRouter{workers: []*routerv1.Worker{full1, second, ok}}
		route, err := routedGenerate(t, newTestBackend(t, r))
		if err != nil || route.GetDecodeWorker().GetId() != "ok" {
			t.Errorf("full-1 and %s before ok: served by %s, %v; want ok", second.GetId(), route.GetDecodeWorker().GetId(), err)
		}
	}
}

// TestRoutedAllFullIsA429: through the OpenAI API, every decode worker full is a
// 429 whose error object says no worker took the request and why.
func TestRoutedAllFullIsA429(t *testing.T) {
	var workers []*routerv1.Worker
	for i := range 4 {
		workers = append(workers, serveDecode(t, &fakeDecode{id: fmt.Sprintf("full-%d", i+1), full: true}))
	}
	f, _ := newTestFrontend(t, testConfig(), newTestBackend(t, &fakeRouter{workers: workers}))
	srv := newHTTPServer(t, f)
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"tandem-test","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body openAIError
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || body.Error.Type != "rate_limit_error" ||
		!strings.Contains(body.Error.Message, "no decode worker took the request: 3 refused it") ||
		!strings.Contains(body.Error.Message, "full-1 is at capacity") {
		t.Errorf("status %d, error %+v; want 429 rate_limit_error saying three workers refused and why", resp.StatusCode, body.Error)
	}
}

// TestRoutedPassesPrefillRanking: the decode worker gets the router's prefill
// ranking in order, with the costs that explain it.
func TestRoutedPassesPrefillRanking(t *testing.T) {
	d := &fakeDecode{id: "ok"}
	r := &fakeRouter{workers: []*routerv1.Worker{serveDecode(t, d)}, prefill: []*routerv1.RankedWorker{
		{Worker: &routerv1.Worker{Id: "p1"}, CachedBlocks: 3, QueuedTokens: 40, Cost: 7.5, QueueCostPerToken: 0.0625},
		{Worker: &routerv1.Worker{Id: "p2"}, Cost: 9},
	}}
	if _, err := routedGenerate(t, newTestBackend(t, r)); err != nil {
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

// TestRoutedPassesTheWholeRequest: the decode worker gets the request the frontend
// built, every field of it (a field this build does not know included), plus the
// router's prefill ranking; and the request the caller holds is left as it was.
func TestRoutedPassesTheWholeRequest(t *testing.T) {
	d := &fakeDecode{id: "ok"}
	r := &fakeRouter{workers: []*routerv1.Worker{serveDecode(t, d)}, prefill: []*routerv1.RankedWorker{{Worker: &routerv1.Worker{Id: "p1"}}}}
	req := &decodev1.GenerateRequest{
		RequestId: "r-all", PromptTokenIds: []uint32{5, 6, 7}, Sampling: &workerv1.SamplingParams{Temperature: 0.5, TopP: 0.9, TopK: 4, Seed: 11},
		MaxTokens: 9, StopTokenIds: []uint32{2}, Explain: true,
	}
	req.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 3))
	sent := proto.Clone(req)
	if _, err := routedGenerateReq(t, newTestBackend(t, r), req); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	got := proto.CloneOf(d.last)
	d.mu.Unlock()
	if len(got.GetPrefillWorkers()) != 1 || got.GetPrefillWorkers()[0].GetWorkerId() != "p1" {
		t.Errorf("decode worker got prefill candidates %v, want p1", got.GetPrefillWorkers())
	}
	got.PrefillWorkers = nil
	if !proto.Equal(got, sent) {
		t.Errorf("decode worker got %v, the frontend sent %v", got, sent)
	}
	if !proto.Equal(req, sent) {
		t.Errorf("the caller's request became %v", req)
	}
}

// A request every decode worker refused for room is held and offered again as
// room frees (HoldRefused), and placed when a worker has it: no 429 for a
// moment's state. Past the hold the client hears 429, saying it was held; a
// client that gives up ends the hold at once.
func TestRoutedHoldsRefusedRequests(t *testing.T) {
	busy := &fakeDecode{id: "busy", refuse: 3}
	r := &fakeRouter{workers: []*routerv1.Worker{serveDecode(t, busy)}}
	b := newTestBackend(t, r)
	reg := prometheus.NewRegistry()
	b.HoldRefused(5*time.Second, reg)
	b.holdFirst = 5 * time.Millisecond
	if _, err := routedGenerate(t, b); err != nil {
		t.Fatalf("a worker with room after three refusals: %v", err)
	}
	busy.mu.Lock()
	offers := busy.offers
	busy.mu.Unlock()
	if offers != 4 || metricValue(t, reg, "tandem_frontend_held_requests_total", "outcome", "placed") != 1 ||
		metricValue(t, reg, "tandem_frontend_held_seconds") != 1 {
		t.Errorf("%d offers, metrics placed %v; want 4 offers and one request held, then placed", offers,
			metricValue(t, reg, "tandem_frontend_held_requests_total", "outcome", "placed"))
	}
	// Each offer starts from the whole fleet: the worker that refused the last
	// one may have room now.
	fresh := 0
	for _, ex := range r.excluded {
		if len(ex) == 0 {
			fresh++
		}
	}
	if fresh != 4 {
		t.Errorf("routes asked with exclusions %v; want each of the 4 offers to start with none", r.excluded)
	}

	full := &fakeRouter{workers: []*routerv1.Worker{serveDecode(t, &fakeDecode{id: "full", full: true})}}
	b = newTestBackend(t, full)
	reg = prometheus.NewRegistry()
	b.HoldRefused(100*time.Millisecond, reg)
	b.holdFirst = 5 * time.Millisecond
	_, err := routedGenerate(t, b)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "after it was held") ||
		!strings.Contains(err.Error(), "full is at capacity") {
		t.Errorf("always full: %v; want ResourceExhausted saying it was held, in the worker's words", err)
	}
	if metricValue(t, reg, "tandem_frontend_held_requests_total", "outcome", "refused") != 1 || len(full.excluded) < 3 {
		t.Errorf("refused after the hold counted %v, %d routes; want 1 and several offers",
			metricValue(t, reg, "tandem_frontend_held_requests_total", "outcome", "refused"), len(full.excluded))
	}

	// A shed is no matter of room: the client hears it at once.
	b = newTestBackend(t, &fakeRouter{workers: []*routerv1.Worker{serveDecode(t, &fakeDecode{id: "shedding", shed: true})}})
	reg = prometheus.NewRegistry()
	b.HoldRefused(time.Minute, reg)
	_, err = routedGenerate(t, b)
	if status.Code(err) != codes.ResourceExhausted || strings.Contains(err.Error(), "held") ||
		metricValue(t, reg, "tandem_frontend_held_requests_total", "outcome", "refused") != 0 {
		t.Errorf("shed: %v; want ResourceExhausted at once, not held", err)
	}

	b = newTestBackend(t, &fakeRouter{workers: []*routerv1.Worker{serveDecode(t, &fakeDecode{id: "full", full: true})}})
	reg = prometheus.NewRegistry()
	b.HoldRefused(time.Minute, reg)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, _, err := b.Generate(ctx, &decodev1.GenerateRequest{RequestId: "r2", PromptTokenIds: []uint32{1}, MaxTokens: 1}); status.Code(err) != codes.DeadlineExceeded ||
		metricValue(t, reg, "tandem_frontend_held_requests_total", "outcome", "cancelled") != 1 {
		t.Errorf("client gone during the hold: %v; want DeadlineExceeded, counted as cancelled", err)
	}
}
