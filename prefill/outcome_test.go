package prefill_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	"github.com/tandem-serve/tandem/prefill"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
	"github.com/tandem-serve/tandem/proto/tandem/prefill/v1/prefillv1connect"
)

// heldPrefill blocks every prefill until its context ends, after saying it began.
type heldPrefill struct {
	engine.Engine
	began chan struct{}
}

func (h heldPrefill) Prefill(ctx context.Context, _ engine.Request) (engine.Export, error) {
	h.began <- struct{}{}
	<-ctx.Done()
	return nil, ctx.Err()
}

func outcomes(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "tandem_prefill_requests_total" {
			for _, m := range mf.GetMetric() {
				out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// TestOutcomes: a prefill served whole counts as ok; one whose caller went away
// as cancelled, and one whose caller's deadline ran out as deadline_exceeded, not
// as failures of the prefill worker.
func TestOutcomes(t *testing.T) {
	serve := func(eng engine.Engine) (prefillv1connect.PrefillServiceClient, *prometheus.Registry) {
		reg := prometheus.NewRegistry()
		svc, err := prefill.New(prefill.Config{WorkerID: prefillWorkerID, ChunkBytes: chunkBytes, MaxLease: 10 * time.Second},
			eng, slog.New(slog.DiscardHandler), reg)
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.Handle(prefillv1connect.NewPrefillServiceHandler(svc))
		return prefillv1connect.NewPrefillServiceClient(rpctest.Client(t), rpctest.NewServer(t, mux).URL, connect.WithGRPC()), reg
	}
	call := func(ctx context.Context, c prefillv1connect.PrefillServiceClient) error {
		s, err := c.Prefill(ctx, connect.NewRequest(&prefillv1.PrefillRequest{RequestId: "r", PromptTokenIds: prompt(100, 7)}))
		if err != nil {
			return err
		}
		defer s.Close()
		for s.Receive() {
		}
		return s.Err()
	}
	// waitFor polls: the count is taken as the handler returns, after the caller saw its end.
	waitFor := func(reg *prometheus.Registry, outcome string) map[string]float64 {
		deadline := time.Now().Add(10 * time.Second)
		for outcomes(t, reg)[outcome] == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		return outcomes(t, reg)
	}

	c, reg := serve(newEngine(t))
	if err := call(rpctest.Context(t), c); err != nil {
		t.Fatal(err)
	}
	if got := waitFor(reg, "ok"); got["ok"] != 1 || len(got) != 1 {
		t.Errorf("a prefill served whole: outcomes %v, want ok 1", got)
	}

	held := heldPrefill{Engine: newEngine(t), began: make(chan struct{}, 2)}
	c, reg = serve(held)
	ctx, cancel := context.WithCancel(rpctest.Context(t))
	errc := make(chan error, 1)
	go func() { errc <- call(ctx, c) }()
	<-held.began
	cancel()
	<-errc
	if got := waitFor(reg, "cancelled"); got["cancelled"] != 1 || len(got) != 1 {
		t.Errorf("caller gone mid-prefill: outcomes %v, want cancelled 1", got)
	}

	ctx, cancel = context.WithTimeout(rpctest.Context(t), 300*time.Millisecond)
	defer cancel()
	if err := call(ctx, c); connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Errorf("caller's deadline ran out: %v, want DeadlineExceeded", err)
	}
	if got := waitFor(reg, "deadline_exceeded"); got["deadline_exceeded"] != 1 || got["cancelled"] != 1 || len(got) != 2 {
		t.Errorf("caller's deadline ran out mid-prefill: outcomes %v, want deadline_exceeded 1 beside the earlier cancelled 1", got)
	}
}

// TestDrainingRefusesNewPrefills: a drained prefill worker refuses a new prefill
// at once with Unavailable (the decode worker moves down its ladder), counts it,
// and serves again once undrained.
func TestDrainingRefusesNewPrefills(t *testing.T) {
	reg := prometheus.NewRegistry()
	svc, err := prefill.New(prefill.Config{WorkerID: prefillWorkerID, ChunkBytes: chunkBytes, MaxLease: 10 * time.Second},
		newEngine(t), slog.New(slog.DiscardHandler), reg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(prefillv1connect.NewPrefillServiceHandler(svc))
	c := prefillv1connect.NewPrefillServiceClient(rpctest.Client(t), rpctest.NewServer(t, mux).URL, connect.WithGRPC())
	call := func() (messages int, err error) {
		s, err := c.Prefill(rpctest.Context(t), connect.NewRequest(&prefillv1.PrefillRequest{RequestId: "r", PromptTokenIds: prompt(100, 7)}))
		if err != nil {
			return 0, err
		}
		defer s.Close()
		for s.Receive() {
			messages++
		}
		return messages, s.Err()
	}
	svc.SetDraining(true)
	if n, err := call(); connect.CodeOf(err) != connect.CodeUnavailable || n != 0 {
		t.Errorf("drained: %d messages, error %v; want none and Unavailable", n, err)
	}
	svc.SetDraining(false)
	if n, err := call(); err != nil || n == 0 {
		t.Errorf("undrained: %d messages, error %v; want a handoff", n, err)
	}
	if got := outcomes(t, reg); got["draining"] != 1 {
		t.Errorf("outcomes %v, want draining 1", got)
	}
}
