package decode_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	"github.com/tandem-serve/tandem/proto/tandem/decode/v1/decodev1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// cancelDuring is a decode engine that makes the client go away at a chosen point
// of a remote prefill's import: it cancels the client's request and waits until
// the decode worker has seen it, then lets the real engine carry on.
type cancelDuring struct {
	engine.Engine
	at string // "import" or "commit"

	mu     sync.Mutex
	cancel context.CancelFunc
}

func (e *cancelDuring) goAway(ctx context.Context) {
	e.mu.Lock()
	cancel := e.cancel
	e.mu.Unlock()
	cancel()
	<-ctx.Done()
}

func (e *cancelDuring) Import(ctx context.Context, req engine.Request, spec engine.ImportSpec) (engine.Importer, error) {
	if e.at == "import" {
		e.goAway(ctx)
	}
	im, err := e.Engine.Import(ctx, req, spec)
	if err != nil || e.at != "commit" {
		return im, err
	}
	return &cancelOnCommit{Importer: im, e: e}, nil
}

type cancelOnCommit struct {
	engine.Importer
	e *cancelDuring
}

func (im *cancelOnCommit) Commit(ctx context.Context) (engine.Stream, error) {
	im.e.goAway(ctx)
	return im.Importer.Commit(ctx)
}

// handlerErrs hands each Generate's returned error to the test, once the handler
// is done with its metrics.
type handlerErrs chan error

func (h handlerErrs) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }
func (h handlerErrs) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}
func (h handlerErrs) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		err := next(ctx, conn)
		h <- err
		return err
	}
}

// TestClientCancelDuringImportIsNotARemoteFailure: a client that goes away while
// the decode worker imports the prefill worker's KV ends its request as Canceled.
// The import then fails ("import: context canceled", or an aborted import at
// commit), but that is the client's doing: no remote prefill failure, no fallback
// and no decision (no path was taken) is counted. Blocks are freed on both sides.
func TestClientCancelDuringImportIsNotARemoteFailure(t *testing.T) {
	for _, at := range []string{"import", "commit"} {
		t.Run(at, func(t *testing.T) {
			peng := newNative(t)
			pf := &staticPrefillers{}
			pf.add("p0", startPrefill(t, peng, "p0").client)
			deng := &cancelDuring{Engine: newNative(t), at: at}
			reg := prometheus.NewRegistry()
			svc, err := decode.New(decode.Config{
				WorkerID: "decode-test", Mode: workerv1.WorkerMode_WORKER_MODE_DECODE, Params: alwaysRemote,
				MinRemoteDeadline: 5 * time.Second, MaxRemoteDeadline: 10 * time.Second,
			}, deng, pf, quietLog(), reg)
			if err != nil {
				t.Fatal(err)
			}
			errs := make(handlerErrs, 1)
			mux := http.NewServeMux()
			mux.Handle(decodev1connect.NewDecodeServiceHandler(svc, connect.WithInterceptors(errs)))
			srv := rpctest.NewServer(t, mux)
			client := decodev1connect.NewDecodeServiceClient(rpctest.Client(t), srv.URL, connect.WithGRPC())

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			deng.mu.Lock()
			deng.cancel = cancel
			deng.mu.Unlock()
			if _, err := generate(t, ctx, client, request("r", prompt(21, 120), 0, 0, "p0")); connect.CodeOf(err) != connect.CodeCanceled {
				t.Fatalf("client saw %v, want Canceled", err)
			}
			var herr error
			select {
			case herr = <-errs:
			case <-time.After(30 * time.Second): // a deadlock guard, not a speed check
				t.Fatal("Generate never returned after its client went away")
			}
			if connect.CodeOf(herr) != connect.CodeCanceled {
				t.Errorf("Generate returned %v (code %v), want Canceled", herr, connect.CodeOf(herr))
			}
			got := counters(t, reg)
			for _, name := range []string{"tandem_decode_remote_prefill_failures_total", "tandem_decode_fallbacks_total", "tandem_prefill_decisions_total"} {
				for labels, v := range got[name] {
					t.Errorf("%s%s = %g after a client cancel, want nothing counted", name, labels, v)
				}
			}
			waitIdle(t, "decode", deng)
			waitIdle(t, "prefill", peng)
		})
	}
}

// counters reads every counter in reg as name -> {labels} -> value.
func counters(t *testing.T, reg *prometheus.Registry) map[string]map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if m.GetCounter() == nil {
				continue
			}
			labels := "{"
			for i, l := range m.GetLabel() {
				if i > 0 {
					labels += ","
				}
				labels += l.GetName() + `="` + l.GetValue() + `"`
			}
			labels += "}"
			if out[mf.GetName()] == nil {
				out[mf.GetName()] = map[string]float64{}
			}
			out[mf.GetName()][labels] = m.GetCounter().GetValue()
		}
	}
	return out
}
