package fakeengine

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"time"
)

// StreamFault is how a server answers a streamed (or non-streamed) completion that
// is not a disaggregation prefill leg. Each is a way a real deployment was seen to
// fail in front of a tandem worker, with no fault of the client's.
type StreamFault string

const (
	StreamOK StreamFault = ""
	// StreamGarbage sends FaultAfter tokens, then a data event that is not JSON (a
	// server bug or a proxy's corruption).
	StreamGarbage StreamFault = "garbage"
	// StreamHTML answers 200 with an HTML page instead of an event stream, as a
	// misconfigured proxy in front of the engine does.
	StreamHTML StreamFault = "html"
	// StreamDie sends FaultAfter tokens, then drops the connection with no end:
	// the engine process was killed mid-stream.
	StreamDie StreamFault = "die"
	// StreamSilent accepts the request and never answers, not even with headers:
	// an engine whose event loop is wedged.
	StreamSilent StreamFault = "silent"
	// StreamStall sends the headers and FaultAfter tokens, then nothing more while
	// holding the connection open.
	StreamStall StreamFault = "stall"
	// StreamTruncated sends FaultAfter tokens, then ends the response cleanly with
	// neither a finish reason nor [DONE]: a proxy that closes long responses.
	StreamTruncated StreamFault = "truncated"
)

// SetStreamFault makes the following completions fail so, after `after` tokens
// where the fault streams some.
func (s *Server) SetStreamFault(f StreamFault, after int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streamFault, s.faultAfter = f, after
}

func (s *Server) currentStreamFault() (StreamFault, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streamFault, s.faultAfter
}

// SetHealthy makes /health answer 200 (true) or 503 (false), as vLLM's does
// while its engine core is alive or dead.
func (s *Server) SetHealthy(ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unhealthy = !ok
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	bad := s.unhealthy
	s.mu.Unlock()
	if bad {
		writeError(w, http.StatusServiceUnavailable, "the engine core is dead")
		return
	}
	w.WriteHeader(http.StatusOK)
}

// faultBefore answers a completion the fault takes whole, before any token,
// reporting whether it did.
func (s *Server) faultBefore(w http.ResponseWriter, r *http.Request) bool {
	f, _ := s.currentStreamFault()
	switch f {
	case StreamHTML:
		w.Header().Set("Content-Type", "text/html")
		_, _ = fmt.Fprint(w, "<html><body><h1>502 Bad Gateway</h1><hr>nginx</body></html>\n")
		return true
	case StreamSilent:
		<-r.Context().Done()
		s.cancel(r)
		return true
	}
	return false
}

// faultAt acts on a streamed answer after i tokens were sent, reporting whether
// the stream is over.
func (s *Server) faultAt(w http.ResponseWriter, r *http.Request, i int) bool {
	f, after := s.currentStreamFault()
	if i != after {
		return false
	}
	switch f {
	case StreamGarbage:
		_, _ = fmt.Fprint(w, "data: {\"choices\": [oops\n\n")
		flush(w)
		return true
	case StreamDie:
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
			}
		}
		return true
	case StreamStall:
		<-r.Context().Done()
		s.cancel(r)
		return true
	case StreamTruncated:
		return true
	}
	return false
}

func flush(w http.ResponseWriter) {
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
}

// Kill stops the server at once, dropping every connection, as a killed engine
// process does; Revive starts it again on the same address.
func (s *Server) Kill() {
	s.mu.Lock()
	srv := s.httpSrv
	s.mu.Unlock()
	srv.CloseClientConnections()
	srv.Close()
}

// Revive serves again on the address the server had, after Kill.
func (s *Server) Revive(t interface {
	Cleanup(func())
	Fatal(...any)
}) {
	srv := listenOn(t, s.mux, s.httpSrv.Listener.Addr().String())
	s.mu.Lock()
	s.httpSrv = srv
	s.mu.Unlock()
}

// listenOn serves h on addr until the test's cleanup, retrying a moment while a
// socket just closed there lingers.
func listenOn(t interface {
	Cleanup(func())
	Fatal(...any)
}, h http.Handler, addr string) *httptest.Server {
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	_ = srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}
