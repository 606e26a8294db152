// Package fakeengine is a stand-in for a GPU engine server (vLLM, TensorRT-LLM,
// SGLang) built from the engines' documented protocols, for tests that have no
// GPU: it serves /v1/models, /v1/completions (streamed and not, with the token-id
// fields each engine has), the engines' Prometheus metrics, and each engine's
// disaggregation legs; it records every request it was sent, so a test can
// assert the exact bodies; and Publisher publishes vLLM KV events over ZMQ.
//
// Where each field comes from (main branches of 2026-11):
//   - vLLM: vllm/entrypoints/openai/completion/protocol.py (CompletionRequest:
//     prompt as token ids, return_token_ids, return_tokens_as_token_ids with
//     logprobs, kv_transfer_params; CompletionStreamResponse's choices[].token_ids;
//     CompletionResponse.kv_transfer_params), vllm/entrypoints/openai/models
//     (max_model_len), tests/v1/kv_connector/nixl_integration/toy_proxy_server.py
//     and nixl_connector.py (the prefill leg's answer: do_remote_prefill,
//     remote_engine_id, remote_block_ids, remote_host, remote_port,
//     remote_request_id, tp_size), vllm/v1/metrics/loggers.py (metric names).
//   - TensorRT-LLM: tensorrt_llm/serve/openai_protocol.py (DisaggregatedParams,
//     request_type context_only / generation_only, choices[0].disaggregated_params,
//     prompt_token_ids), postprocess_handlers.py (detokenize=false: token_ids and
//     empty text), tensorrt_llm/metrics/collector.py (trtllm_* at /prometheus/metrics).
//   - SGLang: python/sglang/srt/entrypoints/openai/protocol.py (return_token_ids,
//     bootstrap_host/port/room), sgl-model-gateway/src/routers/http/pd_router.rs
//     (the same body to both servers; the prefill leg not streamed),
//     python/sglang/srt/metrics/collector.py (sglang:* metric names).
package fakeengine

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// Kind is the engine a Server pretends to be.
type Kind string

const (
	VLLM   Kind = "vllm"
	TRTLLM Kind = "trtllm"
	SGLang Kind = "sglang"
)

// PrefillFault is how a server answers a disaggregation prefill leg.
type PrefillFault string

const (
	PrefillOK       PrefillFault = ""
	Prefill503      PrefillFault = "503"       // HTTP 503
	PrefillHang     PrefillFault = "hang"      // never answers until the client goes
	PrefillNoParams PrefillFault = "no-params" // answers, without transfer parameters
)

// Server is one fake engine server.
type Server struct {
	Kind        Kind
	Model       string
	MaxModelLen int
	// TokenIDs: the engine honours return_token_ids (TRT-LLM: detokenize=false).
	// LogprobIDs: it honours return_tokens_as_token_ids. Neither: text only.
	TokenIDs, LogprobIDs bool
	// Text is a token's text, for the text field of every answer.
	Text func(id uint32) string
	// Output is what the model generates, in order (cycled).
	Output []uint32
	// TokenDelay is the time between streamed tokens.
	TokenDelay time.Duration
	// FirstTokenDelay, when set, is the time before the first streamed token
	// instead of TokenDelay: the engine's own TTFT, for benchmarks.
	FirstTokenDelay time.Duration
	// Metrics are the load figures served.
	Running, Waiting int
	KVUsage          float64
	TotalBlocks      int
	// PrefixQueries and PrefixHits are vLLM's prefix cache counters, in tokens.
	PrefixQueries, PrefixHits int

	httpSrv *httptest.Server
	mux     *http.ServeMux

	mu          sync.Mutex
	requests    []Request
	fault       PrefillFault
	streamFault StreamFault
	faultAfter  int
	unhealthy   bool
	// gone delivers cancelled request ids to a test that waits for them; a test
	// that does not read it must not stall the handlers, so sends never block
	// and every id is also kept in cancelled.
	gone      chan string
	cancelled []string
}

// Request is one request the server was sent.
type Request struct {
	Path      string
	RequestID string // X-Request-Id
	// Traceparent is the W3C trace context the request carried, which a real
	// engine server's own spans would join.
	Traceparent string
	Body        json.RawMessage
}

// Start serves on a loopback port until the test's cleanup.
func (s *Server) Start(t interface{ Cleanup(func()) }) *Server {
	s.init()
	s.httpSrv = httptest.NewServer(s.mux)
	t.Cleanup(s.httpSrv.Close)
	return s
}

// StartOn serves on addr (a server that comes up after its worker started).
func (s *Server) StartOn(t interface {
	Cleanup(func())
	Fatal(...any)
}, addr string) *Server {
	s.init()
	s.httpSrv = listenOn(t, s.mux, addr)
	return s
}

func (s *Server) init() {
	if s.Model == "" {
		s.Model = "fake-model"
	}
	if s.MaxModelLen == 0 {
		s.MaxModelLen = 4096
	}
	if s.Text == nil {
		s.Text = func(id uint32) string { return fmt.Sprintf(" t%d", id) }
	}
	if len(s.Output) == 0 {
		s.Output = []uint32{11, 12, 13, 14, 15, 16, 17, 18}
	}
	s.gone = make(chan string, 64)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("POST /v1/completions", s.completions)
	mux.HandleFunc("GET /metrics", s.metrics)
	mux.HandleFunc("GET /prometheus/metrics", s.metrics)
	mux.HandleFunc("GET /health", s.health)
	s.mux = mux
}

// URL is the server's base URL.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.httpSrv.URL
}

// SetPrefillFault makes the following prefill legs fail so.
func (s *Server) SetPrefillFault(f PrefillFault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = f
}

// Requests are the requests received so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Completions are the /v1/completions requests received, probes left out.
func (s *Server) Completions() []Request {
	var out []Request
	for _, r := range s.Requests() {
		if r.Path == "/v1/completions" && !strings.HasPrefix(r.RequestID, "tandem-probe") {
			out = append(out, r)
		}
	}
	return out
}

// Cancelled delivers the X-Request-Id of each streamed request whose client went
// away before it was over. Ids beyond the channel's buffer of 64 unread ones are
// not delivered there; CancelledIDs has them all.
func (s *Server) Cancelled() <-chan string { return s.gone }

// CancelledIDs are the X-Request-Id of every request cancelled so far, in order.
func (s *Server) CancelledIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.cancelled...)
}

// cancel records that the client of r went away.
func (s *Server) cancel(r *http.Request) {
	id := r.Header.Get("X-Request-Id")
	s.mu.Lock()
	s.cancelled = append(s.cancelled, id)
	s.mu.Unlock()
	select {
	case s.gone <- id:
	default:
	}
}

func (s *Server) record(r *http.Request, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, Request{Path: r.URL.Path, RequestID: r.Header.Get("X-Request-Id"),
		Traceparent: r.Header.Get("Traceparent"), Body: body})
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	s.record(r, nil)
	type model struct {
		ID          string `json:"id"`
		Object      string `json:"object"`
		MaxModelLen int    `json:"max_model_len,omitempty"`
	}
	m := model{ID: s.Model, Object: "model"}
	if s.Kind != TRTLLM { // trtllm-serve's ModelCard has no max_model_len
		m.MaxModelLen = s.MaxModelLen
	}
	writeJSON(w, map[string]any{"object": "list", "data": []model{m}})
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	switch {
	case s.Kind == VLLM && r.URL.Path == "/metrics":
		fmt.Fprintf(&b, "# HELP vllm:num_requests_running Number of requests in model execution batches.\n# TYPE vllm:num_requests_running gauge\n")
		fmt.Fprintf(&b, "vllm:num_requests_running{engine=\"0\",model_name=%q} %d\n", s.Model, s.Running)
		fmt.Fprintf(&b, "vllm:num_requests_waiting{engine=\"0\",model_name=%q} %d\n", s.Model, s.Waiting)
		fmt.Fprintf(&b, "vllm:kv_cache_usage_perc{engine=\"0\",model_name=%q} %g\n", s.Model, s.KVUsage)
		fmt.Fprintf(&b, "vllm:cache_config_info{block_size=\"16\",engine=\"0\",num_gpu_blocks=\"%d\"} 1.0\n", s.TotalBlocks)
		fmt.Fprintf(&b, "# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total{engine=\"0\",model_name=%q} %d.0\n", s.Model, s.PrefixQueries)
		fmt.Fprintf(&b, "# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total{engine=\"0\",model_name=%q} %d.0\n", s.Model, s.PrefixHits)
	case s.Kind == TRTLLM && r.URL.Path == "/prometheus/metrics":
		fmt.Fprintf(&b, "trtllm_num_requests_running{model_name=%q,engine_type=\"trtllm\"} %d\n", s.Model, s.Running)
		fmt.Fprintf(&b, "trtllm_num_requests_waiting{model_name=%q,engine_type=\"trtllm\"} %d\n", s.Model, s.Waiting)
		fmt.Fprintf(&b, "trtllm_kv_cache_utilization{model_name=%q,engine_type=\"trtllm\"} %g\n", s.Model, s.KVUsage)
		fmt.Fprintf(&b, "trtllm_kv_cache_max_blocks{model_name=%q,engine_type=\"trtllm\"} %d\n", s.Model, s.TotalBlocks)
	case s.Kind == SGLang && r.URL.Path == "/metrics":
		fmt.Fprintf(&b, "sglang:num_running_reqs{model_name=%q,dp=\"0\"} %d\n", s.Model, s.Running)
		fmt.Fprintf(&b, "sglang:num_queue_reqs{model_name=%q,dp=\"0\"} %d\n", s.Model, s.Waiting)
		fmt.Fprintf(&b, "sglang:token_usage{model_name=%q,dp=\"0\"} %g\n", s.Model, s.KVUsage)
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	_, _ = w.Write([]byte(b.String()))
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "error", "message": msg, "type": "BadRequestError", "code": status})
}
