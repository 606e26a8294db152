package decode_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/sim"
	"github.com/tandem-serve/tandem/engine/sim/simtest"
	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	"github.com/tandem-serve/tandem/proto/tandem/decode/v1/decodev1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// statsEngine is a real engine whose Stats report the KV use and prompt tokens
// waiting the test sets.
type statsEngine struct {
	engine.Engine
	mu             sync.Mutex
	active, tokens int
}

func (e *statsEngine) set(active, tokens int) {
	e.mu.Lock()
	e.active, e.tokens = active, tokens
	e.mu.Unlock()
}

func (e *statsEngine) Stats() engine.Stats {
	st := e.Engine.Stats()
	e.mu.Lock()
	defer e.mu.Unlock()
	st.ActiveBlocks, st.WaitingTokens = e.active, e.tokens
	return st
}

// startAdmitting serves a decode worker over eng with the admission limits of
// cfg, over real HTTP/2, and returns a client and its metrics registry.
func startAdmitting(t *testing.T, eng engine.Engine, maxKV float64, maxWaiting int) (decodev1connect.DecodeServiceClient, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	svc, err := decode.New(decode.Config{
		WorkerID: "d", Mode: workerv1.WorkerMode_WORKER_MODE_AGGREGATED, Params: alwaysLocal,
		MinRemoteDeadline: time.Second, MaxRemoteDeadline: time.Second, MaxKVUsage: maxKV, MaxWaitingTokens: maxWaiting,
	}, eng, nil, quietLog(), reg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(decodev1connect.NewDecodeServiceHandler(svc))
	return decodev1connect.NewDecodeServiceClient(rpctest.Client(t), rpctest.NewServer(t, mux).URL, connect.WithGRPC()), reg
}

// rejected reads tandem_decode_rejected_total by reason.
func rejected(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "tandem_decode_rejected_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// A decode worker refuses a new request while its engine's KV pool is fuller
// than MaxKVUsage, or more prompt tokens than MaxWaitingTokens wait there (at the
// limit it still takes it), with ResourceExhausted naming the limit, counted by
// reason.
func TestAdmissionOnLoad(t *testing.T) {
	eng := &statsEngine{Engine: simtest.New(t, nil)}
	total := eng.Engine.Stats().TotalBlocks
	client, reg := startAdmitting(t, eng, 0.5, 100)
	for i, tc := range []struct {
		active, tokens int
		want           string // in the error; "" admitted
	}{
		{0, 0, ""},
		{total / 2, 100, ""},
		{total/2 + 1, 0, "above the limit of 50.0% (MaxKVUsage 0.5)"},
		{0, 101, "101 prompt tokens waiting for prefill (0 requests), above the limit of 100 (MaxWaitingTokens 100)"},
		{total, 1000, "(MaxKVUsage 0.5)"}, // the first limit crossed is the one named
	} {
		eng.set(tc.active, tc.tokens)
		r, err := generate(t, context.Background(), client, request("r", prompt(i, 20), 0, 0))
		switch {
		case tc.want == "" && (err != nil || len(r.tokens) == 0):
			t.Errorf("%d of %d blocks, %d tokens waiting: %v, want served", tc.active, total, tc.tokens, err)
		// The Config field, never a flag: services/ names the flag (workersvc).
		case tc.want != "" && (connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), tc.want) ||
			strings.Contains(err.Error(), "--")):
			t.Errorf("%d of %d blocks, %d tokens waiting: %v, want ResourceExhausted saying %q", tc.active, total, tc.tokens, err, tc.want)
		case tc.want != "" && !hasReason(err, "KV_USAGE", "WAITING_TOKENS"):
			t.Errorf("%d of %d blocks, %d tokens waiting: %v, want the refusal's reason as an ErrorInfo", tc.active, total, tc.tokens, err)
		}
	}
	if got := rejected(t, reg); got[decode.RejectKVUsage] != 2 || got[decode.RejectWaitingTokens] != 1 || got[decode.RejectMaxRunning] != 0 {
		t.Errorf("rejections by reason %v, want kv_usage 2, waiting_tokens 1, max_running 0", got)
	}
}

// Through a real engine's own load: a sequence holding most of the sim's KV pool
// makes a worker limited on KV usage refuse, a prompt queued in the engine for
// blocks (its admission queue) makes one limited on waiting tokens refuse, and
// the queued request is still served once blocks free.
func TestAdmissionOnRealEngineLoad(t *testing.T) {
	// The mocker's timing, so that the long sequence holds its blocks for a
	// minute of wall time (a decode step of about 34 ms at 98 % KV usage).
	eng := simtest.New(t, func(c *sim.Config) { c.NumBlocks, c.TimeScale = 100, 1 })
	onKV, kvReg := startAdmitting(t, eng, 0.9, 0)
	onQueue, queueReg := startAdmitting(t, eng, 0, 50)

	// 64 prompt + 1500 output tokens: 98 of the 100 blocks, reserved at admission.
	hctx, stopHolder := context.WithCancel(context.Background())
	defer stopHolder()
	hold := request("holder", prompt(1, 64), 0, 0)
	hold.MaxTokens = 1500
	holder, err := onQueue.Generate(hctx, connect.NewRequest(hold))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if !holder.Receive() {
		t.Fatalf("holder: %v", holder.Err())
	}
	if _, err := generate(t, context.Background(), onKV, request("kv", prompt(2, 16), 0, 0)); connect.CodeOf(err) != connect.CodeResourceExhausted ||
		!strings.Contains(err.Error(), "98 of 100 blocks") {
		t.Errorf("98 %% of the KV pool in use, limit 90 %%: %v, want ResourceExhausted naming the usage", err)
	}

	// 100 + 100 tokens need 13 blocks, 2 are free: the engine queues it, and the
	// worker limited on waiting tokens, which took it (nothing waited), refuses
	// the next.
	queued := request("queued", prompt(3, 100), 0, 0)
	queued.MaxTokens = 100
	done := make(chan error, 1)
	go func() {
		r, err := generate(t, context.Background(), onQueue, queued)
		if err == nil && len(r.tokens) == 0 {
			err = context.DeadlineExceeded
		}
		done <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); eng.Stats().WaitingTokens != 100; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the 100-token prompt never queued: %+v", eng.Stats())
		}
	}
	if _, err := generate(t, context.Background(), onQueue, request("late", prompt(4, 16), 0, 0)); connect.CodeOf(err) != connect.CodeResourceExhausted ||
		!strings.Contains(err.Error(), "100 prompt tokens waiting") {
		t.Errorf("100 tokens waiting, limit 50: %v, want ResourceExhausted naming them", err)
	}
	stopHolder()
	if err := <-done; err != nil {
		t.Errorf("the queued request, once the holder's blocks freed: %v", err)
	}
	if got := rejected(t, kvReg); got[decode.RejectKVUsage] != 1 {
		t.Errorf("KV-limited worker's rejections %v, want kv_usage 1", got)
	}
	if got := rejected(t, queueReg); got[decode.RejectWaitingTokens] != 1 || got[decode.RejectKVUsage] != 0 {
		t.Errorf("queue-limited worker's rejections %v, want waiting_tokens 1", got)
	}
	waitIdle(t, "decode engine", eng)
}

// hasReason says whether err carries a google.rpc.ErrorInfo of the decode
// domain with one of reasons: the frontend holds a refusal for room and not a
// shed by it.
func hasReason(err error, reasons ...string) bool {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return false
	}
	for _, d := range ce.Details() {
		v, verr := d.Value()
		if ei, ok := v.(*errdetails.ErrorInfo); verr == nil && ok && ei.GetDomain() == decode.ErrorDomain && slices.Contains(reasons, ei.GetReason()) {
			return true
		}
	}
	return false
}
