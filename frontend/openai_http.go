package frontend

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"

	"github.com/tandem-serve/tandem/internal/requestid"
	"github.com/tandem-serve/tandem/internal/spans"
)

// HTTPHandler serves the OpenAI-compatible API: POST /v1/chat/completions,
// POST /v1/completions, GET /v1/models, GET /v1/models/{model}, GET /healthz
// (liveness: the process answers) and GET /readyz (readiness: a model is loaded
// and the router serves; 503 with the reason until then). Every other path
// under /v1/ is a 404 in OpenAI's error shape.
func (f *Frontend) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	post, get := []string{http.MethodPost}, []string{http.MethodGet, http.MethodHead}
	mux.Handle("/v1/chat/completions", f.endpoint("chat_completions", post, f.handleChat))
	mux.Handle("/v1/completions", f.endpoint("completions", post, f.handleCompletions))
	mux.Handle("/v1/models", f.endpoint("models", get, f.handleModels))
	mux.Handle("/v1/models/{model}", f.endpoint("models", get, f.handleModel))
	mux.Handle("/healthz", f.endpoint("healthz", get, f.handleHealth))
	mux.Handle("/readyz", f.endpoint("readyz", get, f.handleReady))
	mux.Handle("/tokenize", f.endpoint("tokenize", post, f.handleTokenize))
	mux.Handle("/detokenize", f.endpoint("detokenize", post, f.handleDetokenize))
	mux.Handle("/v1/", f.endpoint("unknown", nil, func(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
		f.writeError(w, rc, &apiError{code: connect.CodeNotFound, status: http.StatusNotFound,
			msg: fmt.Sprintf("unknown path %s", r.URL.Path)})
	}))
	return mux
}

// reqCtx is what every handler knows about its request.
type reqCtx struct {
	id       string
	log      *slog.Logger
	start    time.Time
	endpoint string
}

type handlerFunc func(w http.ResponseWriter, r *http.Request, rc *reqCtx)

// endpoint wraps h with what every request gets: a request id (echoed, logged, sent
// to the backend), method checking, panic recovery, and the request metrics.
func (f *Frontend) endpoint(name string, methods []string, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := requestid.Keep(r.Header.Get(requestid.Header))
		w.Header().Set(requestid.Header, id)
		sw := &statusWriter{ResponseWriter: w}
		rc := &reqCtx{id: id, log: withTrace(r.Context(), f.log.With("request_id", id, "endpoint", name)), start: time.Now(), endpoint: name}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				rc.log.Error("panic in HTTP handler", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				if sw.status == 0 {
					f.writeError(sw, rc, &apiError{code: connect.CodeInternal, msg: "internal error"})
				}
			}
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			f.metrics.requests.WithLabelValues(name, strconv.Itoa(status)).Inc()
			if status == http.StatusOK && (name == "chat_completions" || name == "completions") {
				f.metrics.e2e.WithLabelValues(name).Observe(time.Since(rc.start).Seconds())
			}
		}()
		if methods != nil && !slices.Contains(methods, r.Method) {
			w.Header().Set("Allow", strings.Join(methods, ", "))
			f.writeError(sw, rc, &apiError{code: connect.CodeUnimplemented, status: http.StatusMethodNotAllowed,
				msg: fmt.Sprintf("method %s is not allowed on %s; use %s", r.Method, r.URL.Path, strings.Join(methods, " or "))})
			return
		}
		if name != "healthz" && name != "readyz" && !f.requireKey(sw, r, rc) {
			return
		}
		h(sw, r, rc)
	})
}

// statusWriter remembers the status for metrics and for knowing whether an error
// can still be sent as a status (before the headers) or only as an SSE event.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush on the real writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Our own response types always marshal; this is a programming error.
		http.Error(w, `{"error":{"message":"internal error","type":"server_error","param":null,"code":null}}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func (f *Frontend) writeError(w http.ResponseWriter, rc *reqCtx, err error) {
	ae := asAPIError(err)
	status := ae.httpStatus()
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		// Clients (the OpenAI SDKs among them) wait this long before retrying.
		w.Header().Set("Retry-After", "1")
	}
	if status >= 500 {
		rc.log.Warn("request failed", "status", status, "err", err)
	} else {
		rc.log.Info("request rejected", "status", status, "param", ae.param, "err", ae.msg)
	}
	writeJSON(w, status, ae.openAI())
}

// readJSON reads a body of at most MaxBodyBytes and decodes it into v, turning
// every failure into a 4xx that says what was wrong.
func (f *Frontend) readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	_, span := spans.Start(r.Context(), "frontend.parse")
	defer span.End()
	timed := f.limitBodyTime(w, r)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, f.cfg.MaxBodyBytes))
	if timed != nil {
		if timed.timedOut {
			return f.bodyTimeoutError(w, timed)
		}
		timed.done()
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &apiError{code: connect.CodeResourceExhausted, status: http.StatusRequestEntityTooLarge,
				msg: fmt.Sprintf("request body is larger than the limit of %d bytes", f.cfg.MaxBodyBytes)}
		}
		return &apiError{code: connect.CodeInvalidArgument, msg: "could not read the request body: " + err.Error()}
	}
	// encoding/json would quietly turn invalid UTF-8 into U+FFFD; a client sending
	// it has a bug it should hear about.
	if !utf8.Valid(body) {
		return &apiError{code: connect.CodeInvalidArgument, msg: "request body is not valid UTF-8"}
	}
	if err := json.Unmarshal(body, v); err != nil {
		return jsonError(err)
	}
	return nil
}

// toGen copies the fields chat and completions share.
func (s *samplingFields) toGen(g *genRequest) error {
	if s.N != nil && (*s.N < 1 || *s.N > maxN) {
		return invalidField("n", "n=%d is out of range; it must be between 1 and %d", *s.N, maxN)
	}
	if err := s.unsupportedFields.check(); err != nil {
		return err
	}
	g.model = s.Model
	g.maxTokensParam = "max_tokens"
	switch {
	case s.MaxCompletionTokens != nil:
		g.maxTokensParam = "max_completion_tokens"
		g.maxTokens = *s.MaxCompletionTokens
	case s.MaxTokens != nil:
		g.maxTokens = *s.MaxTokens
	}
	if (s.MaxCompletionTokens != nil || s.MaxTokens != nil) && g.maxTokens < 1 && !(g.maxTokens == 0 && s.echo) {
		return invalidField(g.maxTokensParam, "%s must be at least 1, got %d (0 only with echo)", g.maxTokensParam, g.maxTokens)
	}
	g.echoOnly = s.echo && g.maxTokens == 0 && (s.MaxCompletionTokens != nil || s.MaxTokens != nil)
	g.temperature, g.topP = s.Temperature, s.TopP
	if s.Seed != nil {
		seed := uint64(*s.Seed) // negative seeds are valid in OpenAI's API; keep their bits
		g.seed = &seed
	}
	g.stops = s.Stop
	g.ignoreEOS = s.IgnoreEOS
	if err := g.controls.parse(s); err != nil {
		return err
	}
	g.user = s.User
	return nil
}

func (f *Frontend) handleChat(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	var req chatRequest
	if err := f.readJSON(w, r, &req); err != nil {
		f.writeError(w, rc, err)
		return
	}
	served, err := f.current()
	if err != nil {
		f.writeError(w, rc, err)
		return
	}
	g := &genRequest{requestID: rc.id, served: served, isChat: true, promptParam: "messages"}
	if err := req.toGen(g); err != nil {
		f.writeError(w, rc, err)
		return
	}
	want := req.Logprobs != nil && *req.Logprobs
	if req.TopLogprobs != nil && *req.TopLogprobs > 0 && !want {
		f.writeError(w, rc, invalidField("top_logprobs", "top_logprobs needs logprobs set to true"))
		return
	}
	if err := requestLogprobs(g, want, req.TopLogprobs, "top_logprobs"); err != nil {
		f.writeError(w, rc, err)
		return
	}
	if g.messages, err = chatMessages(req.Messages); err != nil {
		f.writeError(w, rc, err)
		return
	}
	if g.tools, err = parseTools(&req.Tools, req.ToolChoice, req.ParallelToolCalls); err != nil {
		f.writeError(w, rc, err)
		return
	}
	out := &chatFormat{id: "chatcmpl-" + rc.id, model: served.ID, created: time.Now().Unix()}
	if n := req.choices(); n > 1 && g.tools.parses() {
		f.writeError(w, rc, invalidField("n", "n=%d with tools is not supported; ask for one choice, or set tool_choice to none", n))
		return
	}
	if n := req.choices(); n > 1 {
		f.serveChoices(w, r, rc, []*genRequest{g}, plainChoices(n), &req.samplingFields, out)
		return
	}
	f.serveGeneration(w, r, rc, g, &req.samplingFields, out)
}

func (f *Frontend) handleCompletions(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	var req completionRequest
	if err := f.readJSON(w, r, &req); err != nil {
		f.writeError(w, rc, err)
		return
	}
	served, err := f.current()
	if err != nil {
		f.writeError(w, rc, err)
		return
	}
	g := &genRequest{requestID: rc.id, served: served, promptParam: "prompt"}
	req.echo = req.Echo
	if err := req.toGen(g); err != nil {
		f.writeError(w, rc, err)
		return
	}
	if req.Logprobs != nil {
		if err := requestLogprobs(g, true, req.Logprobs, "logprobs"); err != nil {
			f.writeError(w, rc, err)
			return
		}
	}
	plan, err := f.completionPlan(&req, g)
	if err != nil {
		f.writeError(w, rc, err)
		return
	}
	switch p := req.Prompt; {
	case !p.Present:
		f.writeError(w, rc, invalidField("prompt", "prompt is required"))
		return
	case p.Count > maxPrompts:
		f.writeError(w, rc, invalidField("prompt", "%d prompts given; at most %d are allowed in one request", p.Count, maxPrompts))
		return
	case p.Count*plan.candidates > maxChoices:
		field, what := "n", fmt.Sprintf("n=%d", plan.n)
		if plan.ranked() {
			field, what = "best_of", fmt.Sprintf("best_of=%d", plan.candidates)
		}
		f.writeError(w, rc, invalidField(field, "%d prompts with %s ask for %d choices; at most %d are allowed in one request",
			p.Count, what, p.Count*plan.candidates, maxChoices))
		return
	case p.IsIDs:
		g.promptIDs = p.IDs
		if g.promptIDs == nil {
			g.promptIDs = []uint32{}
		}
	default:
		g.prompt = p.Text
	}
	out := &completionFormat{id: "cmpl-" + rc.id, model: served.ID, created: time.Now().Unix()}
	if plan.candidates > 1 || req.Prompt.Count > 1 || plan.echo {
		prompts := batch(g, &req.Prompt)
		if plan.echo {
			plan.echoTexts = echoTexts(served, prompts)
		}
		f.serveChoices(w, r, rc, prompts, plan, &req.samplingFields, out)
		return
	}
	f.serveGeneration(w, r, rc, g, &req.samplingFields, out)
}

// serveGeneration runs g and writes the answer whole or as server-sent events.
func (f *Frontend) serveGeneration(w http.ResponseWriter, r *http.Request, rc *reqCtx, g *genRequest, s *samplingFields, out responseFormat) {
	p, err := f.prepareTraced(r.Context(), g)
	if err != nil {
		f.writeError(w, rc, err)
		return
	}
	gen, err := f.start(r.Context(), p, rc.log, rc.start)
	if err != nil && r.Context().Err() != nil {
		// Gone before the first token (start logged it): as routine as going
		// away after it, and recorded as 499 too.
		w.WriteHeader(statusClientClosed)
		return
	}
	if err != nil {
		f.writeError(w, rc, err)
		return
	}
	defer gen.close(rc.endpoint)
	w.Header().Set(HeaderPrefillPath, gen.info.Path)
	tr := f.newToolReply(p, g, rc.log)
	if tr != nil {
		_, how := f.toolParser(p.served)
		gen.info.ToolCallParser = p.parser.Name()
		rc.log.Info("reading the reply for tool calls", "parser", p.parser.Name(), "picked_by", how,
			"tool_choice", g.tools.choice, "tools", len(g.tools.tools), "enforced", g.tools.enforced())
	}

	if !s.Stream {
		var sb strings.Builder
		var lps []tokenLogprob
		for {
			text, done, err := gen.next()
			if err != nil && r.Context().Err() != nil {
				rc.log.Info("client went away before the answer", "err", err)
				// Nobody reads it; it records the request as 499 (client closed), as
				// writeError would, not as a 200 with a cut-short latency.
				w.WriteHeader(statusClientClosed)
				return
			}
			if err != nil {
				f.writeError(w, rc, err)
				return
			}
			sb.WriteString(text)
			lps = append(lps, gen.takeLogprobs()...)
			if done {
				break
			}
		}
		if !g.logprobs {
			lps = nil
		} else if lps == nil {
			lps = []tokenLogprob{}
		}
		if tr != nil {
			content, calls := tr.whole(sb.String())
			writeJSON(w, http.StatusOK, out.(*chatFormat).wholeTools(content, calls, finishReason(gen.finish, len(calls)), gen.usage(), &gen.info, lps))
			return
		}
		writeJSON(w, http.StatusOK, out.whole(sb.String(), gen.finish, gen.usage(), &gen.info, lps))
		return
	}

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // keep proxies from buffering the stream
	w.WriteHeader(http.StatusOK)
	sse := &sseWriter{w: w, rc: http.NewResponseController(w)}
	// The first token is already here (start waited for it): the opening event
	// goes out with it in one write, not a write and a client wake-up of its
	// own on the way to the first token.
	sse.hold = true
	sse.send(out.first(&gen.info))
	sse.hold = false
	for {
		text, done, err := gen.next()
		if err != nil {
			if r.Context().Err() != nil {
				// The client cancelled: nothing failed, and there is no one to tell.
				rc.log.Info("client went away during the stream", "err", err)
				return
			}
			// The status is already 200; the SDKs surface an error event instead.
			ae := asAPIError(err)
			rc.log.Warn("stream failed after it started", "err", err)
			sse.send(ae.openAI())
			sse.done()
			return
		}
		if tr != nil {
			out.(*chatFormat).sendDeltas(sse, tr.push(text), gen.takeLogprobs())
		} else if lps := gen.takeLogprobs(); text != "" || lps != nil {
			sse.send(out.delta(text, lps))
		}
		if done {
			break
		}
	}
	finish := gen.finish
	if tr != nil {
		var deltas []chatDelta
		deltas, finish = tr.close(finish)
		out.(*chatFormat).sendDeltas(sse, deltas, nil)
	}
	sse.send(out.finish(finish))
	if s.StreamOptions != nil && s.StreamOptions.IncludeUsage {
		sse.send(out.usage(gen.usage()))
	}
	sse.done()
	if sse.err != nil {
		rc.log.Info("client went away during the stream", "err", sse.err)
	}
}

type sseWriter struct {
	w  io.Writer
	rc *http.ResponseController
	// hold writes without flushing: the next write sends both.
	hold bool
	err  error
}

func (s *sseWriter) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		s.err = err
		return
	}
	s.write("data: " + string(b) + "\n\n")
}

func (s *sseWriter) done() { s.write("data: [DONE]\n\n") }

func (s *sseWriter) write(msg string) {
	if s.err != nil {
		return
	}
	if _, err := io.WriteString(s.w, msg); err != nil {
		s.err = err
		return
	}
	if s.hold {
		return
	}
	if err := s.rc.Flush(); err != nil {
		s.err = err
	}
}
