package integration

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/tandem-serve/tandem/internal/testutil"
	"github.com/tandem-serve/tandem/internal/testutil/fakeengine"
)

// span is what the tests read of an exported span.
type span struct {
	trace, id, parent, name, service string
	failed, client                   bool   // status Error; kind Client
	status                           string // the status code's name, e.g. STATUS_CODE_OK
	attrs                            map[string]string
	events                           map[string]map[string]string // by name: the event's attributes
}

// otlpReceiver is an OTLP/gRPC trace collector on loopback that keeps every span.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	addr  string
	mu    sync.Mutex
	spans []span
}

func startReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{addr: ln.Addr().String()}
	s := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(s, r)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return r
}

func attrString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_ArrayValue:
		var vs []string
		for _, e := range x.ArrayValue.GetValues() {
			vs = append(vs, attrString(e))
		}
		return strings.Join(vs, "|")
	}
	return v.String()
}

func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		var service string
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = attrString(a.GetValue())
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := span{trace: hex.EncodeToString(s.GetTraceId()), id: hex.EncodeToString(s.GetSpanId()),
					parent: hex.EncodeToString(s.GetParentSpanId()), name: s.GetName(), service: service, attrs: map[string]string{},
					failed: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR, client: s.GetKind() == tracepb.Span_SPAN_KIND_CLIENT}
				for _, a := range s.GetAttributes() {
					sp.attrs[a.GetKey()] = attrString(a.GetValue())
				}
				sp.status, sp.events = s.GetStatus().GetCode().String(), map[string]map[string]string{}
				for _, e := range s.GetEvents() {
					sp.events[e.GetName()] = map[string]string{}
					for _, a := range e.GetAttributes() {
						sp.events[e.GetName()][a.GetKey()] = attrString(a.GetValue())
					}
				}
				r.spans = append(r.spans, sp)
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// trace is the spans of one trace received so far.
func (r *otlpReceiver) trace(id string) []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []span
	for _, s := range r.spans {
		if s.trace == id {
			out = append(out, s)
		}
	}
	return out
}

// named is the first span whose name has the prefix, or nil.
func named(spans []span, prefix string) *span {
	for i := range spans {
		if strings.HasPrefix(spans[i].name, prefix) {
			return &spans[i]
		}
	}
	return nil
}

// ancestor reports whether a is s or one of s's ancestors in spans.
func ancestor(spans []span, a, s *span) bool {
	byID := map[string]*span{}
	for i := range spans {
		byID[spans[i].id] = &spans[i]
	}
	for cur := s; cur != nil; cur = byID[cur.parent] {
		if cur.id == a.id {
			return true
		}
	}
	return false
}

func dumpSpans(spans []span) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "\n  %s %s parent %s [%s] %v", s.id, s.name, s.parent, s.service, s.attrs)
	}
	return b.String()
}

// postTraced posts a chat with a W3C traceparent and returns the response's headers.
func postTraced(t *testing.T, url, traceparent, content string) http.Header {
	t.Helper()
	body := fmt.Sprintf(`{"model":"tandem-tiny","max_tokens":4,"messages":[{"role":"user","content":%q}]}`, content)
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	return resp.Header
}

// A request prefilled remotely under tandem up, traced to an OTLP collector: the
// caller's traceparent is kept, the response names the trace, and the spans of
// every hop (frontend, router, decode worker, prefill worker, KV stream) form one
// tree under the caller's span.
func TestTracingRemotePrefill(t *testing.T) {
	rcv := startReceiver(t)
	proc, url := startUpWith(t, []string{fixtureModel, "TANDEM_LOG_LEVEL=info"}, "--otlp-endpoint", rcv.addr, "--short-prefill-threshold", "32")
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	h := postTraced(t, url, "00-"+traceID+"-"+parentID+"-01", longPrompt(1, 300))
	if p := h.Get("x-tandem-prefill-path"); p != "remote" {
		t.Fatalf("prefill path %q, want remote", p)
	}
	if got := h.Get("x-trace-id"); got != traceID {
		t.Errorf("x-trace-id %q, want the caller's trace %s", got, traceID)
	}
	want := []string{"POST /v1/chat/completions", "tandem.router.v1.RouterService/Route", "tandem.decode.v1.DecodeService/Generate",
		"tandem.prefill.v1.PrefillService/Prefill", "frontend.parse", "frontend.prepare", "router.decide", "decode.decide",
		"decode.remote_prefill", "frontend.template", "frontend.tokenize"}
	var spans []span
	testutil.WaitForWithin(t, 30*time.Second, "every hop's span is exported", func() bool {
		spans = rcv.trace(traceID)
		for _, n := range want {
			if named(spans, n) == nil {
				return false
			}
		}
		return true
	})
	root := named(spans, want[0])
	if root.parent != parentID {
		t.Errorf("the frontend's span has parent %s, want the caller's %s%s", root.parent, parentID, dumpSpans(spans))
	}
	for _, n := range want[1:] {
		if s := named(spans, n); !ancestor(spans, root, s) {
			t.Errorf("%s is not under the frontend's span%s", n, dumpSpans(spans))
		}
	}
	// The decode worker calls the prefill worker within its decision's rung: the
	// handoff's spans are under the rung's, the rung's under the decision's.
	dec, decide, rung := named(spans, want[2]), named(spans, "decode.decide"), named(spans, "decode.remote_prefill")
	if pre := named(spans, want[3]); !ancestor(spans, rung, pre) || !ancestor(spans, decide, rung) || !ancestor(spans, dec, decide) {
		t.Errorf("want Generate > decode.decide > decode.remote_prefill > Prefill%s", dumpSpans(spans))
	}
	wantAttrs(t, spans, "decode.decide", map[string]string{"tandem.decode.path": "remote", "tandem.decode.reason": "", "tandem.decode.effective_tokens": ""})
	wantAttrs(t, spans, "decode.remote_prefill", map[string]string{"tandem.prefill.worker": "prefill-0", "tandem.kv.bytes": "", "tandem.kv.blocks": ""})
	wantAttrs(t, spans, "router.decide", map[string]string{"tandem.route.decode_worker": "decode-0", "tandem.route.decode_cost": "",
		"tandem.route.prefill_candidates": ""})
	wantAttrs(t, spans, "frontend.prepare", map[string]string{"tandem.frontend.prompt_tokens": ""})
	// The chat template and the tokenizer are steps of their own under prepare,
	// so that a slow template is told from a slow tokenizer.
	prep := named(spans, "frontend.prepare")
	for _, n := range []string{"frontend.template", "frontend.tokenize"} {
		if s := named(spans, n); s.parent != prep.id {
			t.Errorf("%s is not a child of frontend.prepare%s", n, dumpSpans(spans))
		}
	}
	wantAttrs(t, spans, "frontend.template", map[string]string{"tandem.frontend.prompt_cut": "split"})
	wantAttrs(t, spans, "frontend.tokenize", map[string]string{"tandem.frontend.prompt_tokens": prep.attrs["tandem.frontend.prompt_tokens"]})
	// The request's own span says how its stream ended, as the client saw it.
	end := root.events["tandem.frontend.stream_end"]
	if end == nil || end["tandem.frontend.finish_reason"] == "" || end["tandem.frontend.finish_reason"] == "none" ||
		end["tandem.frontend.completion_tokens"] == "" || end["tandem.frontend.completion_tokens"] == "0" || end["tandem.frontend.ttft_ms"] == "" {
		t.Errorf("the request's span has stream end %v, want its finish reason, completion tokens and TTFT", end)
	}
	// A stream read to its end is a success on the caller's side too, though the
	// caller cancels its context once it has the stream's last message. (The
	// decode worker's Prefill call still ends cancelled: it stops at the KV
	// trailer, and waiting there for the sender's end of stream would hold a
	// finished handoff on a sender that never ends it.)
	for _, s := range spans {
		if s.client && strings.HasPrefix(s.name, "tandem.decode.v1") &&
			(s.failed || s.attrs["rpc.response.status_code"] != "OK") {
			t.Errorf("client span %s ended with status %s, gRPC code %s, want OK: %v", s.name, s.status, s.attrs["rpc.response.status_code"], s.attrs)
		}
	}
	if rung.failed || named(spans, "decode.remote_prefill").attrs["tandem.kv.blocks"] == "0" {
		t.Errorf("the remote prefill's rung failed or moved no KV%s", dumpSpans(spans))
	}
	// Each span names the service that made it, though tandem up runs them all in
	// one process and shares its connections to peers among them.
	for _, s := range spans {
		want := map[string]string{"frontend": "tandem-frontend", "router": "tandem-router", "decode": "tandem-decode"}[strings.Split(s.name, ".")[0]]
		if strings.HasPrefix(s.name, "tandem.prefill.v1") {
			want = map[bool]string{false: "tandem-prefill", true: "tandem-decode"}[s.client]
		}
		if want != "" && s.service != want {
			t.Errorf("span %s is from service %s, want %s", s.name, s.service, want)
		}
	}
	// Without a traceparent, the request starts a trace of its own.
	newTrace := postTraced(t, url, "", "hello").Get("x-trace-id")
	if len(newTrace) != 32 || newTrace == traceID {
		t.Errorf("x-trace-id %q without a traceparent, want a new trace's id", newTrace)
	}
	// Probes and background calls (watches, peers' info, model cards) start no
	// trace: every span exported is one of the two requests'.
	if resp, err := http.Get(url + "/health"); err == nil {
		resp.Body.Close()
	}
	testutil.WaitForWithin(t, 30*time.Second, "the second request's spans are exported", func() bool {
		return named(rcv.trace(newTrace), "decode.decide") != nil
	})
	rcv.mu.Lock()
	for _, s := range rcv.spans {
		if s.trace != traceID && s.trace != newTrace {
			t.Errorf("span %s of service %s is in a trace of no request", s.name, s.service)
		}
	}
	rcv.mu.Unlock()
	// The logs lead to the trace: the frontend's and the decode worker's lines
	// about the request carry its trace id.
	for _, msg := range []string{`"msg":"generation started"`, `"msg":"prefill decision"`} {
		found := false
		for _, line := range strings.Split(proc.logs(), "\n") {
			found = found || (strings.Contains(line, msg) && strings.Contains(line, `"trace_id":"`+traceID+`"`))
		}
		if !found {
			t.Errorf("no log line %s with the trace id", msg)
		}
	}
}

// wantAttrs checks the attributes of the span named name: each key is present,
// with the value given when it is not "".
func wantAttrs(t *testing.T, spans []span, name string, want map[string]string) {
	t.Helper()
	s := named(spans, name)
	if s == nil {
		t.Errorf("no span %s%s", name, dumpSpans(spans))
		return
	}
	for k, v := range want {
		got, ok := s.attrs[k]
		if !ok || (v != "" && got != v) {
			t.Errorf("span %s: %s = %q (present %v), want %q", name, k, got, ok, v)
		}
	}
}

// traceOf is the trace id of a W3C traceparent, or "".
func traceOf(traceparent string) string {
	if f := strings.Split(traceparent, "-"); len(f) == 4 {
		return f[1]
	}
	return ""
}

// Behind GPU engine servers (fake vLLM), traced: both engine requests of a remote
// prefill carry the request's trace context, so the engine's spans join its trace;
// a prefill worker whose engine fails shows as a failed rung of the ladder, under a
// decision whose path is the fallback.
func TestTracingGPUEngineAndFallback(t *testing.T) {
	rcv := startReceiver(t)
	otlp := []string{"--otlp-endpoint", rcv.addr}
	p := (&fakeengine.Server{Kind: fakeengine.VLLM, TokenIDs: true}).Start(t)
	d := (&fakeengine.Server{Kind: fakeengine.VLLM, TokenIDs: true}).Start(t)
	pre := gpuWorker(t, "prefill", "prefill-g", p, otlp...)
	dec := gpuWorker(t, "decode", "decode-g", d, append([]string{"--prefill-workers", pre, "--short-prefill-threshold", "32"}, otlp...)...)
	rtr := startService(t, append([]string{"router", "--listen", "127.0.0.1:0", "--decode-workers", dec, "--prefill-workers", pre}, otlp...)...)
	fe := startService(t, append([]string{"frontend", "--listen", "127.0.0.1:0", "--router", rtr}, otlp...)...)
	waitHealthy(t, fe)

	const remoteTrace, fallbackTrace = "0af7651916cd43dd8448eb211c80319c", "5b8efff798038103d269b633813fc60c"
	post := func(trace string) (path, reason string) {
		body := fmt.Sprintf(`{"model":"fake-model","prompt":%q,"max_tokens":4,"temperature":0}`, gpuLongPrompt+trace)
		req, _ := http.NewRequest("POST", "http://"+fe+"/v1/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("traceparent", "00-"+trace+"-b7ad6b7169203331-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out completion
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %d: %v", resp.StatusCode, err)
		}
		if got := resp.Header.Get("x-trace-id"); got != trace {
			t.Errorf("x-trace-id %q, want %s", got, trace)
		}
		return out.Tandem.PrefillPath, out.Tandem.PrefillReason
	}

	if path, reason := post(remoteTrace); path != "remote" {
		t.Fatalf("prefill path %s (%s), want remote", path, reason)
	}
	for name, f := range map[string]*fakeengine.Server{"prefill": p, "decode": d} {
		var traces []string
		for _, r := range f.Completions() {
			traces = append(traces, traceOf(r.Traceparent))
		}
		if !slices.Contains(traces, remoteTrace) {
			t.Errorf("the %s engine's requests carried traces %q, want %s", name, traces, remoteTrace)
		}
	}

	p.SetPrefillFault(fakeengine.Prefill503)
	if path, reason := post(fallbackTrace); path != "fallback" || reason != "remote_error_before_kv" {
		t.Fatalf("prefill path %s (%s), want fallback for remote_error_before_kv", path, reason)
	}
	var spans []span
	testutil.WaitForWithin(t, 30*time.Second, "the fallback's spans are exported", func() bool {
		spans = rcv.trace(fallbackTrace)
		return named(spans, "decode.decide") != nil && named(spans, "decode.remote_prefill") != nil
	})
	rung := named(spans, "decode.remote_prefill")
	if !rung.failed || rung.attrs["tandem.prefill.failure"] != "remote_error_before_kv" || rung.attrs["tandem.prefill.before_kv"] != "true" {
		t.Errorf("the failed rung: %+v%s", rung, dumpSpans(spans))
	}
	wantAttrs(t, spans, "decode.decide", map[string]string{"tandem.decode.path": "fallback", "tandem.decode.reason": "remote_error_before_kv"})
	if decide := named(spans, "decode.decide"); !ancestor(spans, decide, rung) {
		t.Errorf("the rung is not under the decision%s", dumpSpans(spans))
	}
	// The engine's HTTP requests are spans of the trace too, the decode engine's
	// local prefill among them, under the decision's span.
	var engineSpan *span
	for i := range spans {
		if strings.HasPrefix(spans[i].attrs["url.full"], d.URL()) {
			engineSpan = &spans[i]
		}
	}
	if engineSpan == nil || !ancestor(spans, named(spans, "tandem.decode.v1.DecodeService/Generate"), engineSpan) {
		t.Fatalf("no span of the decode engine's request under the decode worker's%s", dumpSpans(spans))
	}
	// The streamed engine request finished, and its span says so (not only "200").
	if engineSpan.status != tracepb.Status_STATUS_CODE_OK.String() {
		t.Errorf("the decode engine's streamed request ended %s, want OK%s", engineSpan.status, dumpSpans(spans))
	}
}

// The router's decision span lists every decode candidate with its cost, least
// first, so that a trace says what the winner beat.
func TestTracingRouterCandidates(t *testing.T) {
	rcv := startReceiver(t)
	_, url := startUpWith(t, []string{fixtureModel}, "--otlp-endpoint", rcv.addr, "--decode", "3", "--prefill", "0")
	id := postTraced(t, url, "", "hello").Get("x-trace-id")
	var spans []span
	testutil.WaitForWithin(t, 30*time.Second, "the router's span is exported", func() bool {
		spans = rcv.trace(id)
		return named(spans, "router.decide") != nil
	})
	d := named(spans, "router.decide")
	cands := strings.Split(d.attrs["tandem.route.decode_candidates"], "|")
	if len(cands) != 3 || d.attrs["tandem.route.decode_candidates_left_off"] != "0" {
		t.Fatalf("router.decide lists candidates %q (%s left off), want the 3 decode workers%s",
			cands, d.attrs["tandem.route.decode_candidates_left_off"], dumpSpans(spans))
	}
	seen := map[string]bool{}
	for _, c := range cands {
		w, rest, _ := strings.Cut(c, " ")
		seen[w] = strings.HasPrefix(rest, "cost=") && strings.Contains(rest, "cached_blocks=")
	}
	for _, w := range []string{"decode-0", "decode-1", "decode-2"} {
		if !seen[w] {
			t.Errorf("candidate %s missing or without its cost in %q", w, cands)
		}
	}
	winCost := strings.TrimPrefix(strings.Fields(cands[0])[1], "cost=")
	if cost, err := strconv.ParseFloat(winCost, 64); err != nil || fmt.Sprintf("%.3g", cost) != winCost {
		t.Errorf("first candidate's cost %q is not a number", winCost)
	}
}
