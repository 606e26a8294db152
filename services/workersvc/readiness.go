package workersvc

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
)

// readiness is what decides whether the worker serves: it has started, is not
// shutting down or drained, knows its prefill workers, and its engine answers.
// Health (grpc.health.v1, which Consul checks) and /readyz say the same thing;
// /readyz says why not.
type readiness struct {
	mu       sync.Mutex
	running  bool   // Run has begun
	stopping bool   // shutdown has begun
	waiting  string // why the engine is not there yet (a GPU engine server starting)
	down     string // why the engine stopped answering
}

// healthReporter is an engine that knows whether its server answers
// (openaihttp.Engine).
type healthReporter interface {
	OnHealthChange(func(ok bool, reason string))
}

// notServing says why the worker does not serve now; "" when it does.
func (s *Service) notServing() string {
	r := &s.ready
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.stopping:
		return "shutting down"
	case r.waiting != "":
		return r.waiting
	case r.down != "":
		return r.down
	case !r.running:
		return "starting"
	case s.drained.Load():
		return "drained (tandem drain); tandem drain --undo serves again"
	case !s.peersKnown():
		return "waiting for the first view of the prefill workers"
	}
	return ""
}

// refreshServing sets health from the worker's state now.
func (s *Service) refreshServing() {
	if s.srv != nil {
		s.srv.SetServing(s.notServing() == "")
	}
}

// update changes the readiness state under its lock, then health.
func (s *Service) update(f func(r *readiness)) {
	s.ready.mu.Lock()
	f(&s.ready)
	s.ready.mu.Unlock()
	s.refreshServing()
}

// followEngineHealth makes an engine server's outages the worker's: NOT_SERVING
// (Consul's check fails), and draining with the reason in its event stream (the
// router and decode workers send it nothing new) until the engine answers again.
func (s *Service) followEngineHealth() {
	hr, ok := s.eng.(healthReporter)
	if !ok {
		return
	}
	hr.OnHealthChange(func(ok bool, reason string) {
		if ok {
			reason = ""
		}
		s.worker.SetUnavailable(reason)
		s.update(func(r *readiness) { r.down = reason })
	})
}

// readyz answers GET /readyz: 200 while the worker serves, else 503 with the
// reason, for load balancers and for people asking why a worker is NOT_SERVING.
func (s *Service) readyz() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		reason := s.notServing()
		if reason != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]string{"status": "not serving", "reason": reason})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "serving"})
	})
	return mux
}

// early is a server that serves (health and /readyz) before Run, while a GPU
// engine server is waited for; Run takes it over.
type early struct {
	cancel context.CancelFunc
	done   chan error
}

func (s *Service) serveEarly(ctx context.Context) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e := &early{cancel: cancel, done: make(chan error, 1)}
	go func() { e.done <- s.srv.Serve(sctx) }()
	s.early = e
}

// stopEarly ends the early server, as when Start fails after it began.
func (s *Service) stopEarly() {
	if s.early != nil {
		s.early.cancel()
		<-s.early.done
	}
}
