package consul

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/internal/testutil"
)

// fakeAgent answers the agent endpoints the registrar uses and records the calls.
type fakeAgent struct {
	mu         sync.Mutex
	calls      []string
	registered bool
	// hang makes register calls wait until the request's context ends.
	hang bool
}

func (a *fakeAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.calls = append(a.calls, r.Method+" "+r.URL.Path)
	hang := a.hang
	a.mu.Unlock()
	switch {
	case strings.HasPrefix(r.URL.Path, "/v1/agent/service/register"):
		if hang {
			// The body is read first: until it is, net/http does not notice the
			// client hanging up, and the context would never end.
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
			return
		}
		a.mu.Lock()
		a.registered = true
		a.mu.Unlock()
	case r.URL.Path == "/v1/agent/services":
		// A predecessor at the same address, as an agent restores one from its
		// data directory after a host restart.
		_, _ = w.Write([]byte(`{"svc-0":{"ID":"svc-0","Service":"tandem-decode","Address":"127.0.0.1","Port":9000},` +
			`"svc-1":{"ID":"svc-1","Service":"tandem-decode","Address":"127.0.0.1","Port":9000}}`))
	case strings.HasPrefix(r.URL.Path, "/v1/agent/service/deregister/svc-0"):
	case strings.HasPrefix(r.URL.Path, "/v1/agent/service/deregister/"):
		a.mu.Lock()
		a.registered = false
		a.mu.Unlock()
	case strings.HasPrefix(r.URL.Path, "/v1/agent/service/"):
		a.mu.Lock()
		defer a.mu.Unlock()
		if !a.registered {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`{"ID":"svc-1","Service":"tandem-decode"}`))
	}
}

func (a *fakeAgent) count(prefix string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, c := range a.calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

func newTestRegistrar(t *testing.T, a *fakeAgent) *Registrar {
	t.Helper()
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	c, err := NewClient(strings.TrimPrefix(srv.URL, "http://"), "", slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.NewRegistrar(Config{CheckInterval: time.Second, CheckTimeout: time.Second, DeregisterAfter: time.Minute},
		Registration{Name: "tandem-decode", ID: "svc-1", Addr: "127.0.0.1:9000"})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A worker that registers removes the registration its killed predecessor left at
// its address (which its own health check would keep passing), and only that one.
func TestRegisterRemovesStalePredecessor(t *testing.T) {
	a := &fakeAgent{}
	r := newTestRegistrar(t, a)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx, time.Hour); close(done) }()
	testutil.WaitFor(t, "the stale registration is removed", func() bool { return a.count("PUT /v1/agent/service/deregister/svc-0") == 1 })
	cancel()
	<-done
	if n := a.count("PUT /v1/agent/service/deregister/svc-1"); n != 0 {
		t.Errorf("the registrar deregistered itself %d times", n)
	}
}

// TestDeregisterIsFinal: once the drain has deregistered the service, the
// registrar's loop never puts it back, however its timing falls.
func TestDeregisterIsFinal(t *testing.T) {
	a := &fakeAgent{}
	r := newTestRegistrar(t, a)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan struct{})
	go func() { r.Run(ctx, 10*time.Millisecond); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for a.count("PUT /v1/agent/service/register") == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	r.Deregister()
	select {
	case <-done: // the loop ends by itself once deregistered
	case <-time.After(10 * time.Second):
		t.Fatal("Run still running after Deregister")
	}
	registers := a.count("PUT /v1/agent/service/register")
	a.mu.Lock()
	registered := a.registered
	a.mu.Unlock()
	if registers != 1 || registered {
		t.Errorf("after Deregister: %d registrations, still registered %v; want 1 and false", registers, registered)
	}
}

// TestDeregisterNotHeldByAHungAgent: a registration stuck on a hung agent holds
// the drain (Deregister waits for it) for a bounded time only.
func TestDeregisterNotHeldByAHungAgent(t *testing.T) {
	a := &fakeAgent{hang: true}
	r := newTestRegistrar(t, a)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go r.Run(ctx, time.Hour)
	deadline := time.Now().Add(10 * time.Second)
	for a.count("PUT /v1/agent/service/register") == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	finished := make(chan struct{})
	go func() { r.Deregister(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(3 * agentCallTimeout): // a bound, not a speed check
		t.Fatalf("Deregister still waiting %s after a registration hung", 3*agentCallTimeout)
	}
	if a.count("PUT /v1/agent/service/deregister/") != 1 {
		t.Errorf("calls %v, want one deregistration", a.calls)
	}
}
