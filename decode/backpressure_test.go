package decode_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	"github.com/tandem-serve/tandem/prefill"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	"github.com/tandem-serve/tandem/proto/tandem/decode/v1/decodev1connect"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
	"github.com/tandem-serve/tandem/proto/tandem/prefill/v1/prefillv1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// A decode worker at its request limit refuses more at once, with
// ResourceExhausted, and takes them again when a slot frees.
func TestDecodeAdmission(t *testing.T) {
	svc, err := decode.New(decode.Config{
		WorkerID: "d", Mode: workerv1.WorkerMode_WORKER_MODE_DECODE, Params: alwaysLocal,
		MinRemoteDeadline: time.Second, MaxRemoteDeadline: time.Second, MaxRunning: 1,
	}, newNative(t), nil, quietLog(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(decodev1connect.NewDecodeServiceHandler(svc))
	client := decodev1connect.NewDecodeServiceClient(rpctest.Client(t), rpctest.NewServer(t, mux).URL, connect.WithGRPC())

	ctx, cancel := context.WithCancel(context.Background())
	long := request("long", prompt(1, 20), 0, 0)
	long.MaxTokens = 2000
	stream, err := client.Generate(ctx, connect.NewRequest(long))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatalf("first request: %v", stream.Err())
	}
	if _, err := generate(t, context.Background(), client, request("second", prompt(2, 20), 0, 0)); connect.CodeOf(err) != connect.CodeResourceExhausted ||
		!strings.Contains(err.Error(), "at capacity, 1 requests (MaxRunning 1)") {
		t.Fatalf("second request at the limit: %v, want ResourceExhausted naming MaxRunning", err)
	}
	cancel()
	stream.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := generate(t, context.Background(), client, request("third", prompt(3, 20), 0, 0))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot never came back: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A prefill worker whose queue is full refuses at once, and the decode worker
// prefills locally instead of waiting.
func TestPrefillQueueLimit(t *testing.T) {
	peng := newNative(t)
	// The first prefill is held until the end, so the queue stays full for as long
	// as the test needs, however slow the machine.
	gate := gatedPrefill{Engine: peng, arrived: make(chan struct{}, 4), release: make(chan struct{})}
	svc, err := prefill.New(prefill.Config{WorkerID: "p", ChunkBytes: 64 << 10, MaxLease: 10 * time.Second, MaxQueuedTokens: 100},
		gate, quietLog(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(prefillv1connect.NewPrefillServiceHandler(svc))
	srv := rpctest.NewServer(t, mux)
	pc := prefillv1connect.NewPrefillServiceClient(rpctest.Client(t), srv.URL, connect.WithGRPC())

	// 80 queued tokens fit; 80 more do not. (The call returns only when the
	// response starts, after the held prefill, so it runs on its own.)
	firstDone := make(chan error, 1)
	go func() {
		first, err := pc.Prefill(context.Background(), connect.NewRequest(&prefillv1.PrefillRequest{RequestId: "a", PromptTokenIds: prompt(1, 80)}))
		if err == nil {
			for first.Receive() {
			}
			err = first.Err()
			first.Close()
		}
		firstDone <- err
	}()
	<-gate.arrived // the first prompt's 80 tokens are queued at p
	second, err := pc.Prefill(context.Background(), connect.NewRequest(&prefillv1.PrefillRequest{RequestId: "b", PromptTokenIds: prompt(2, 80)}))
	if err == nil {
		for second.Receive() {
		}
		err = second.Err()
	}
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("second prefill past the queue limit: %v, want ResourceExhausted", err)
	}

	pf := &staticPrefillers{}
	pf.add("p", grpcPrefillClient(t, srv.Listener.Addr().String()))
	node := startDecode(t, newNative(t), pf, alwaysRemote, 5*time.Second, 10*time.Second)
	r, err := generate(t, context.Background(), node.client, request("c", prompt(3, 80), 0, 0, "p"))
	if err != nil {
		t.Fatalf("request failed instead of prefilling locally: %v", err)
	}
	if r.decision.GetPath() != decodev1.PrefillPath_PREFILL_PATH_FALLBACK {
		t.Errorf("path %v (%s), want a fallback to local prefill", r.decision.GetPath(), r.decision.GetReason())
	}
	close(gate.release)
	if err := <-firstDone; err != nil {
		t.Errorf("the first prefill, within the limit: %v", err)
	}
}

// gatedPrefill holds every prefill until release is closed, and says when one has
// arrived.
type gatedPrefill struct {
	engine.Engine
	arrived chan struct{}
	release chan struct{}
}

func (g gatedPrefill) Prefill(ctx context.Context, req engine.Request) (engine.Export, error) {
	g.arrived <- struct{}{}
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Engine.Prefill(ctx, req)
}

// The router's queued_tokens for a prefill worker can be a heartbeat old. A decode
// worker counts what it has itself sent there and not seen prefilled, so a prompt
// right behind a long one sees the queue the long one made.
func TestOwnPendingPrefillsCountAsQueued(t *testing.T) {
	peng := newNative(t)
	gate := gatedPrefill{Engine: peng, arrived: make(chan struct{}, 4), release: make(chan struct{})}
	pnode := startPrefill(t, gate, "p")
	pf := &staticPrefillers{}
	pf.add("p", pnode.client)
	params := decode.Params{Policy: decode.PolicyThreshold, ThresholdParams: decode.ThresholdParams{ShortPrefillThreshold: 16, MaxPrefillQueueTokens: 150}}
	node := startDecode(t, newNative(t), pf, params, 10*time.Second, 30*time.Second)
	ctx := context.Background()

	// The router says the queue is empty every time.
	req := func(id string, seed int) *decodev1.GenerateRequest {
		r := request(id, prompt(seed, 200), 0, 0)
		r.PrefillWorkers = []*decodev1.PrefillCandidate{{WorkerId: "p", QueuedTokens: 0}}
		return r
	}
	first := make(chan result, 1)
	go func() {
		r, err := generate(t, ctx, node.client, req("first", 1))
		if err != nil {
			t.Errorf("first request: %v", err)
		}
		first <- r
	}()
	<-gate.arrived // the first prompt's 200 tokens are queued at p

	second, err := generate(t, ctx, node.client, req("second", 2))
	if err != nil {
		t.Fatal(err)
	}
	if second.decision.GetPath() != decodev1.PrefillPath_PREFILL_PATH_LOCAL || second.decision.GetReason() != "prefill_queue_full" {
		t.Errorf("second request: path %v reason %q (%s); want local prefill_queue_full", second.decision.GetPath(), second.decision.GetReason(),
			second.decision.GetDetail())
	}
	close(gate.release)
	if r := <-first; r.decision.GetPath() != decodev1.PrefillPath_PREFILL_PATH_REMOTE {
		t.Errorf("first request: path %v (%s), want remote", r.decision.GetPath(), r.decision.GetDetail())
	}

	// Once the first is prefilled nothing is pending: a third goes remote again.
	third, err := generate(t, ctx, node.client, req("third", 3))
	if err != nil {
		t.Fatal(err)
	}
	<-gate.arrived
	if third.decision.GetPath() != decodev1.PrefillPath_PREFILL_PATH_REMOTE {
		t.Errorf("third request: path %v reason %q (%s); want remote", third.decision.GetPath(), third.decision.GetReason(), third.decision.GetDetail())
	}
}
