package console

import (
	"bufio"
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/tandem-serve/tandem/frontend"
	"github.com/tandem-serve/tandem/internal/testutil"
	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	"github.com/tandem-serve/tandem/proto/tandem/router/v1/routerv1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/router"
)

// event is one server-sent event as a client reads it.
type event struct {
	name string
	data string
}

// client reads the events endpoint at url until its context ends.
type client struct {
	t      *testing.T
	cancel context.CancelFunc
	events chan event
	done   chan struct{}
}

func connect(t *testing.T, url string) *client {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/console/events", nil)
	tr := &http.Transport{}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		t.Fatalf("GET /console/events: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	c := &client{t: t, cancel: cancel, events: make(chan event, 1024), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		defer close(c.events)
		defer resp.Body.Close()
		defer tr.CloseIdleConnections()
		sc := bufio.NewScanner(resp.Body)
		var ev event
		for sc.Scan() {
			switch line := sc.Text(); {
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			case line == "" && ev.name != "":
				c.events <- ev
				ev = event{}
			}
		}
	}()
	t.Cleanup(c.close)
	return c
}

// close hangs up and waits for the reader to end.
func (c *client) close() {
	c.cancel()
	<-c.done
}

// next returns the next event named name, decoded into v, skipping others.
func next[T any](c *client, name string) T {
	c.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-c.events:
			if !ok {
				c.t.Fatalf("waiting for %s: the stream ended", name)
			}
			if ev.name != name {
				continue
			}
			var v T
			if err := json.Unmarshal([]byte(ev.data), &v); err != nil {
				c.t.Fatalf("%s: %v in %s", name, err, ev.data)
			}
			return v
		case <-timeout:
			c.t.Fatalf("no %s event within 10 s", name)
		}
	}
}

// serveRouter serves a real router over HTTP/2 and returns it with a grpc-go
// client, as the frontend dials it.
func serveRouter(t *testing.T) (*router.Router, routerv1.RouterServiceClient) {
	t.Helper()
	r, err := router.New(router.Config{BlockSize: 16, Params: router.DefaultParams()}, rand.New(rand.NewPCG(1, 2)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(routerv1connect.NewRouterServiceHandler(r))
	srv := rpctest.NewServer(t, mux)
	t.Cleanup(r.Stop)
	return r, routerv1.NewRouterServiceClient(rpctest.GRPCConn(t, srv))
}

var (
	decodeW  = router.Worker{ID: "decode-0", Address: "127.0.0.1:7001", Mode: workerv1.WorkerMode_WORKER_MODE_DECODE, Policy: "threshold"}
	prefillW = router.Worker{ID: "prefill-0", Address: "127.0.0.1:7002", Mode: workerv1.WorkerMode_WORKER_MODE_PREFILL}
)

// The events endpoint tells every page the router's fleet as the router reports
// it, each request as the frontend saw it, and a tick a second; a page that
// disconnects leaves nothing behind.
func TestEventsFollowTheRouterAndTheRequests(t *testing.T) {
	r, rc := serveRouter(t)
	policy := &workerv1.PrefillPolicy{Policy: "threshold", ShortPrefillThreshold: 64, ItlWeight: 0.5}
	if err := r.Update(decodeW, &workerv1.WatchEventsResponse{Incarnation: "1", Snapshot: &workerv1.Snapshot{BlockHashes: []uint64{1, 2}},
		Load: &workerv1.Load{RunningSequences: 3, FreeBlocks: 75, TotalBlocks: 100, ActiveBlocks: 25}, PrefillPolicy: policy}); err != nil {
		t.Fatal(err)
	}
	if err := r.Update(prefillW, &workerv1.WatchEventsResponse{Incarnation: "1", Snapshot: &workerv1.Snapshot{},
		Load: &workerv1.Load{WaitingTokens: 900, FreeBlocks: 50, TotalBlocks: 50}}); err != nil {
		t.Fatal(err)
	}
	c := New(Options{Model: func() string { return "stories260K" }, Version: "v-test"})
	ctx, cancel := context.WithCancel(context.Background())
	following := make(chan struct{})
	go func() { defer close(following); c.FollowFleet(ctx, rc) }()
	defer func() { cancel(); <-following }()
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "api", http.StatusTeapot) })
	srv := httptest.NewServer(c.Handler(api))
	t.Cleanup(srv.Close) // after the pages' own cleanups: Close waits for their streams

	// Everything running before the page connects (the fleet subscription among
	// it) is allowed to outlive it.
	testutil.WaitFor(t, "the fleet subscription", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.fleet.Connected
	})
	before := goleak.IgnoreCurrent()
	page := connect(t, srv.URL)
	if h := next[Hello](page, "hello"); h.Version != "v-test" || h.Model != "stories260K" || h.PolicyWritable || h.WindowSeconds != windowSeconds {
		t.Errorf("hello %+v", h)
	}
	// The snapshot comes first: the fleet known now (perhaps not yet the
	// router's), then the history; then the router's fleet.
	f := next[Fleet](page, "fleet")
	next[History](page, "history")
	for ; !f.Connected; f = next[Fleet](page, "fleet") {
	}
	listed, err := r.ListWorkers(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Workers) != len(listed.Msg.GetWorkers()) || f.BlockSize != 16 || f.IndexBlocks != 2 || f.Router == nil || f.Router.ISLThreshold != 1024 {
		t.Fatalf("fleet %+v; the router lists %v", f, listed.Msg.GetWorkers())
	}
	d, p := f.Workers[0], f.Workers[1]
	if d.ID != "decode-0" || d.Mode != "decode" || d.Address != decodeW.Address || d.Running != 3 || d.KVTotalBlocks != 100 || d.KVUsedBlocks != 25 ||
		d.KVUsage != 0.25 || d.CachedBlocks != 2 || !d.Synced || d.PrefillPolicy == nil || d.PrefillPolicy.ShortPrefillThreshold != 64 {
		t.Errorf("decode worker %+v", d)
	}
	if p.ID != "prefill-0" || p.Mode != "prefill" || p.WaitingTokens != 900 || p.KVUsedBlocks != 0 || p.PrefillPolicy != nil {
		t.Errorf("prefill worker %+v", p)
	}

	// A drain reaches the page.
	if err := r.Update(decodeW, &workerv1.WatchEventsResponse{Incarnation: "1", Draining: true}); err != nil {
		t.Fatal(err)
	}
	for f = next[Fleet](page, "fleet"); !f.Workers[0].Draining; f = next[Fleet](page, "fleet") {
	}

	// A request, then the tick that closes its second.
	start := time.Now()
	c.Record(frontend.Outcome{
		RequestID: "req-1", Endpoint: "chat_completions", Start: start, End: start.Add(300 * time.Millisecond),
		Path: "remote", Reason: "above_threshold", DecodeWorker: "decode-0", PrefillWorker: "prefill-0",
		PromptTokens: 200, DecodeCachedTokens: 32, RouteCachedBlocks: 2, CompletionTokens: 10, Finish: "length",
		TTFT: 40 * time.Millisecond, ITL: 5 * time.Millisecond,
	})
	req := next[Request](page, "request")
	if req.ID != "req-1" || req.Path != "remote" || req.RouteCached != 32 || req.DecodeCached != 32 || req.TTFTMs != 40 || req.ITLMs != 5 ||
		req.DurationMs != 300 || req.Prefill != "prefill-0" {
		t.Errorf("request %+v", req)
	}
	c.tick(time.Now())
	tick := next[Tick](page, "tick")
	if tick.Paths.Remote != 1 || tick.Requests != 1 || tick.Reasons["remote/above_threshold"] != 1 || tick.Tokens != 10 || tick.Model != "stories260K" ||
		tick.TTFT.Count != 1 || tick.TTFT.P99 != 40 || tick.ITL.P50 != 5 || tick.Cache.Expected != 32 || tick.Cache.Found != 32 {
		t.Errorf("tick %+v", tick)
	}

	// A second page gets the history: the tick and the request.
	late := connect(t, srv.URL)
	if h := next[History](late, "history"); len(h.Ticks) != 1 || len(h.Requests) != 1 || h.Requests[0].ID != "req-1" {
		t.Errorf("history for a late page: %+v", h)
	}
	late.close()
	page.close()
	testutil.WaitFor(t, "both pages unsubscribed", func() bool { return c.Subscribers() == 0 })
	goleak.VerifyNone(t, before)
}

// While the router's fleet stream is down the pages are told so, with the last
// fleet known; they are told again when it returns.
func TestFleetWhileTheRouterIsAway(t *testing.T) {
	r, rc := serveRouter(t)
	msg := &workerv1.WatchEventsResponse{Incarnation: "1", Snapshot: &workerv1.Snapshot{}, Load: &workerv1.Load{TotalBlocks: 10}}
	if err := r.Update(decodeW, msg); err != nil {
		t.Fatal(err)
	}
	c := New(Options{})
	ctx, cancel := context.WithCancel(context.Background())
	following := make(chan struct{})
	go func() { defer close(following); c.FollowFleet(ctx, rc) }()
	defer func() { cancel(); <-following }()
	srv := httptest.NewServer(c.Handler(http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	page := connect(t, srv.URL)
	for f := next[Fleet](page, "fleet"); !f.Connected; f = next[Fleet](page, "fleet") {
	}
	r.Stop() // ends the stream, as a router shutting down does
	f := next[Fleet](page, "fleet")
	if f.Connected || f.Error == "" || len(f.Workers) != 1 {
		t.Errorf("after the router's stream ended: %+v; want disconnected, why, and the last workers", f)
	}
}

// Close (shutdown) ends every page's stream at once and refuses new ones.
func TestCloseEndsTheStreams(t *testing.T) {
	c := New(Options{})
	srv := httptest.NewServer(c.Handler(http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	page := connect(t, srv.URL)
	next[History](page, "history")
	c.Close()
	select {
	case <-page.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end after Close")
	}
	resp, err := http.Get(srv.URL + "/console/events")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("events after Close: %d, want 503", resp.StatusCode)
	}
}

// A page that stops reading is dropped once it falls subBuffer events behind,
// rather than holding memory or slowing the others.
func TestSlowPageIsDropped(t *testing.T) {
	c := New(Options{})
	slow, _, err := c.subscribe()
	if err != nil {
		t.Fatal(err)
	}
	for i := range subBuffer + 1 {
		c.Record(frontend.Outcome{RequestID: "r", Path: "local", End: time.Unix(int64(i), 0)})
	}
	if c.Subscribers() != 0 {
		t.Fatalf("%d subscribers after one fell %d events behind", c.Subscribers(), subBuffer+1)
	}
	n := 0
	for range slow.ch {
		n++
	}
	if n != subBuffer {
		t.Errorf("the slow page's channel held %d events before it was closed, want %d", n, subBuffer)
	}
	c.unsubscribe(slow) // the handler's deferred call: harmless after the drop
}
