package frontend

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/internal/testutil/slogtest"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
)

// startedBackend is an endlessBackend that says when a generation has begun.
type startedBackend struct {
	*endlessBackend
	started chan struct{}
	once    sync.Once
}

func (b *startedBackend) Generate(ctx context.Context, req *decodev1.GenerateRequest) (TokenStream, *routerv1.RouteResponse, error) {
	b.once.Do(func() { close(b.started) })
	return b.endlessBackend.Generate(ctx, req)
}

// TestClientCancelIsNotAFailure: a client that cancels its request while the answer
// is being generated is routine. The frontend logs it at INFO ("client went away"),
// never as a WARN or ERROR failure, and writes no error event to a client that is
// gone, whether the answer was streamed or not.
func TestClientCancelIsNotAFailure(t *testing.T) {
	for _, stream := range []bool{true, false} {
		name := map[bool]string{true: "stream", false: "whole"}[stream]
		t.Run(name, func(t *testing.T) {
			recs := &slogtest.Recorder{}
			tok := testTokenizer(t)
			b := &startedBackend{
				endlessBackend: &endlessBackend{token: tok.Encode("x")[0], closed: make(chan struct{})},
				started:        make(chan struct{}),
			}
			reg := prometheus.NewRegistry()
			f, err := New(testConfig(), testModel(tok), b, slog.New(recs), reg)
			if err != nil {
				t.Fatal(err)
			}
			srv := newHTTPServer(t, f)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			body := `{"model":"tandem-test","prompt":"hi","stream":` + map[bool]string{true: "true", false: "false"}[stream] + `}`
			req, err := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/completions", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			done := make(chan struct{})
			go func() {
				defer close(done)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return
				}
				defer resp.Body.Close()
				if stream {
					// Read the first event, then go away mid-stream.
					line, _ := bufio.NewReader(resp.Body).ReadString('\n')
					if !strings.HasPrefix(line, "data: ") {
						t.Errorf("first line of the stream %q, want an event", line)
					}
					cancel()
				}
				_, _ = io.Copy(io.Discard, resp.Body)
			}()
			if !stream {
				<-b.started
				cancel()
			}
			select {
			case <-b.closed:
			case <-time.After(30 * time.Second): // a deadlock guard, not a speed check
				t.Fatal("backend stream never closed after the client went away")
			}
			<-done
			wentAway := false
			for _, r := range recs.Records() {
				if r.Level >= slog.LevelWarn {
					t.Errorf("client cancel logged at %v: %q", r.Level, r.Message)
				}
				if strings.HasPrefix(r.Message, "client went away") && r.Level == slog.LevelInfo {
					wentAway = true
				}
			}
			if !wentAway {
				t.Error(`no INFO "client went away" line for the cancelled request`)
			}
			if stream {
				return // its 200 went out with the first event
			}
			// Counted as 499 (client closed), not as a 200 answered.
			codes := func() map[string]float64 {
				out := map[string]float64{}
				mfs, _ := reg.Gather()
				for _, mf := range mfs {
					if mf.GetName() != "tandem_frontend_requests_total" {
						continue
					}
					for _, m := range mf.GetMetric() {
						for _, l := range m.GetLabel() {
							if l.GetName() == "code" {
								out[l.GetValue()] += m.GetCounter().GetValue()
							}
						}
					}
				}
				return out
			}
			deadline := time.Now().Add(10 * time.Second)
			for codes()["499"] == 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond) // the count is taken as the handler returns
			}
			if got := codes(); got["499"] != 1 || got["200"] != 0 {
				t.Errorf("requests by code %v, want one 499 and no 200", got)
			}
		})
	}
}
