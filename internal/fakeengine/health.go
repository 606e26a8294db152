package fakeengine

import "net/http"

// health answers 200 with an empty body once the server serves, as vLLM's,
// SGLang's and trtllm-serve's /health do; Unhealthy makes it answer 503.
func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	bad := s.unhealthy
	s.mu.Unlock()
	if bad {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// SetUnhealthy makes /health answer 503 (or 200 again).
func (s *Server) SetUnhealthy(bad bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unhealthy = bad
}
