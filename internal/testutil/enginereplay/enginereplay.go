// Package enginereplay serves a capture of a worker's exchanges with a GPU engine
// server (openaihttp.Recorder's JSON lines, `--engine-record`) back to a client,
// for tests that drive the engine adapter against what a real server once said.
//
// A request is matched to a recorded one by method, path and a normalised body:
// the fields that differ from run to run (the token-id prompt, the seed, SGLang's
// bootstrap room, the request id inside vLLM's transfer parameters) are left out.
// Recorded exchanges are served in their order; once a key's are used up, its
// last is served again (metrics and model lists are polled). A request that
// matches none gets HTTP 404 and is kept in Misses.
package enginereplay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/tandem-serve/tandem/engine/openaihttp"
)

// Load reads a capture file: one openaihttp.Exchange per line, every line of
// openaihttp.RecordVersion.
func Load(path string) ([]openaihttp.Exchange, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []openaihttp.Exchange
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 64<<20)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var x openaihttp.Exchange
		if err := json.Unmarshal(sc.Bytes(), &x); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if x.V != openaihttp.RecordVersion {
			return nil, fmt.Errorf("%s:%d: capture format version %d, want %d", path, n, x.V, openaihttp.RecordVersion)
		}
		out = append(out, x)
	}
	return out, sc.Err()
}

// Server serves one capture's HTTP exchanges.
type Server struct {
	// Pace, when positive, replays a stream's chunks at their recorded times
	// multiplied by it; 0 sends them at once.
	Pace float64

	srv *httptest.Server

	mu     sync.Mutex
	byKey  map[string][]*openaihttp.HTTPExchange
	served map[string]int
	misses []string
}

// Start serves xs on a loopback port until the test's cleanup.
func Start(t interface{ Cleanup(func()) }, xs []openaihttp.Exchange) *Server {
	s := &Server{byKey: map[string][]*openaihttp.HTTPExchange{}, served: map[string]int{}}
	for _, x := range xs {
		if x.HTTP != nil {
			k := Key(x.HTTP.Method, x.HTTP.Path, x.HTTP.Body)
			s.byKey[k] = append(s.byKey[k], x.HTTP)
		}
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// URL is the server's base URL.
func (s *Server) URL() string { return s.srv.URL }

// Misses are the requests no recorded exchange matched, as their keys.
func (s *Server) Misses() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.misses...)
}

// varying are the body fields that differ between runs of the same exchange.
var varying = []string{"prompt", "seed", "bootstrap_room"}

// Key is what a request is matched by: method, path and the body normalised.
func Key(method, path string, body []byte) string {
	return method + " " + path + " " + normalise(body)
}

func normalise(body []byte) string {
	var m map[string]json.RawMessage
	if len(body) == 0 || json.Unmarshal(body, &m) != nil || m == nil {
		return string(bytes.TrimSpace(body))
	}
	for _, k := range varying {
		delete(m, k)
	}
	if p, ok := m["kv_transfer_params"]; ok {
		var kv map[string]json.RawMessage
		if json.Unmarshal(p, &kv) == nil && kv != nil {
			delete(kv, "remote_request_id")
			m["kv_transfer_params"], _ = json.Marshal(kv)
		}
	}
	out, _ := json.Marshal(m) // map keys sorted: the same fields compare equal
	return string(out)
}

func (s *Server) next(k string) *openaihttp.HTTPExchange {
	s.mu.Lock()
	defer s.mu.Unlock()
	xs := s.byKey[k]
	if len(xs) == 0 {
		s.misses = append(s.misses, k)
		return nil
	}
	i := min(s.served[k], len(xs)-1)
	s.served[k]++
	return xs[i]
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var body bytes.Buffer
	if _, err := body.ReadFrom(r.Body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	k := Key(r.Method, r.URL.RequestURI(), body.Bytes())
	x := s.next(k)
	if x == nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		msg, _ := json.Marshal("enginereplay: no recorded exchange for " + k)
		fmt.Fprintf(w, `{"object":"error","message":%s,"type":"NotFoundError","code":404}`, msg)
		return
	}
	if x.Status == 0 {
		// The recorded request never got an answer (a transport error): drop
		// the connection, as the server did.
		panic(http.ErrAbortHandler)
	}
	for hk, hv := range x.ResponseHeader {
		w.Header().Set(hk, hv)
	}
	s.wait(r, start, x.HeaderAfter)
	w.WriteHeader(x.Status)
	fl, _ := w.(http.Flusher)
	switch {
	case len(x.Chunks) > 0:
		for _, c := range x.Chunks {
			if !s.wait(r, start, c.After) {
				return
			}
			if _, err := w.Write([]byte(c.Data)); err != nil {
				return
			}
			if fl != nil {
				fl.Flush()
			}
		}
	case len(x.ResponseBody) > 0:
		_, _ = w.Write(x.ResponseBody)
	default:
		_, _ = w.Write([]byte(x.ResponseText))
	}
	if x.Error != "" && x.Error != "closed" && !strings.Contains(x.Error, "EOF") {
		panic(http.ErrAbortHandler) // the body broke off
	}
}

// wait sleeps until `after` seconds (times Pace) from the request's start; false
// when the client went away first.
func (s *Server) wait(r *http.Request, start time.Time, after float64) bool {
	if s.Pace <= 0 {
		return r.Context().Err() == nil
	}
	d := time.Until(start.Add(time.Duration(after * s.Pace * float64(time.Second))))
	select {
	case <-r.Context().Done():
		return false
	case <-time.After(d):
		return true
	}
}
