package frontend

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/internal/testutil"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
)

// gatedBackend holds every Generate until the test lets one through.
type gatedBackend struct {
	fakeBackend
	gate chan struct{}
}

func (b *gatedBackend) Generate(ctx context.Context, req *decodev1.GenerateRequest) (TokenStream, *routerv1.RouteResponse, error) {
	select {
	case <-b.gate:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	return b.fakeBackend.Generate(ctx, req)
}

// With one slot and one queue place, a third concurrent request is refused at once
// with 429 and Retry-After; a queued one that waits too long gets 503; and slots
// come back when requests finish.
func TestAdmissionControl(t *testing.T) {
	cfg := testConfig()
	cfg.MaxInFlight, cfg.MaxQueue, cfg.QueueTimeout = 1, 1, 300*time.Millisecond
	b := &gatedBackend{fakeBackend: fakeBackend{output: []uint32{9906, 1917}, perMsg: 1}, gate: make(chan struct{})}
	f, _ := newTestFrontend(t, cfg, b)
	srv := newHTTPServer(t, f)
	post := func() *http.Response {
		body := `{"model":"tandem-test","prompt":"hi","max_tokens":2}`
		resp, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return nil
		}
		resp.Body.Close()
		return resp
	}
	first := make(chan *http.Response, 1)
	go func() { first <- post() }() // takes the slot, blocks in the backend
	testutil.WaitFor(t, "the condition", func() bool { return len(f.backend.(admittedBackend).a.slots) == 1 })
	second := make(chan *http.Response, 1)
	go func() { second <- post() }() // queues
	testutil.WaitFor(t, "the condition", func() bool {
		f.backend.(admittedBackend).a.mu.Lock()
		defer f.backend.(admittedBackend).a.mu.Unlock()
		return f.backend.(admittedBackend).a.queue == 1
	})

	third := post()
	if third.StatusCode != http.StatusTooManyRequests || third.Header.Get("Retry-After") == "" {
		t.Fatalf("third request: %d, Retry-After %q; want 429 with Retry-After", third.StatusCode, third.Header.Get("Retry-After"))
	}
	// The queued one waits past its timeout while the first still holds the slot.
	if r := <-second; r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		t.Fatalf("queued request after the timeout: %d, want 503 with Retry-After", r.StatusCode)
	}
	b.gate <- struct{}{} // the first finishes
	if r := <-first; r.StatusCode != http.StatusOK {
		t.Fatalf("first request: %d", r.StatusCode)
	}
	// Its slot is free again.
	go func() { b.gate <- struct{}{} }()
	if r := post(); r.StatusCode != http.StatusOK {
		t.Fatalf("after the slot came back: %d", r.StatusCode)
	}
}
