package frontend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"

	"github.com/tandem-serve/tandem/internal/spans"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/tokenizer"
	"github.com/tandem-serve/tandem/toolcall"
)

// maxStops bounds stop sequences per request; each one is searched on every token.
const maxStops = 16

// genRequest is a request in transport-neutral form: the OpenAI HTTP API and the
// Connect service both produce one, so validation, templating, tokenizing and the
// stream handling exist once.
type genRequest struct {
	requestID string
	// served is the model the request runs with, fixed when it arrives (nil: the
	// frontend's current one).
	served *Model
	model  string
	// Exactly one of messages, prompt and promptIDs is used, in that order.
	messages  []Message
	prompt    string
	promptIDs []uint32
	isChat    bool
	// promptParam names the prompt's field in errors ("messages" or "prompt").
	promptParam string
	// maxTokens is 0 when the client set none.
	maxTokens      int64
	maxTokensParam string
	temperature    *float64
	topP           *float64
	seed           *uint64
	stops          []string
	// ignoreEOS sends no stop tokens: only max_tokens, the context or a stop
	// string ends the answer.
	ignoreEOS bool
	explain   bool
	controls  samplingControls
	// logprobs asks for each token's log-probability and topLogprobs alternatives.
	logprobs    bool
	topLogprobs int
	// user is the client's end-user id (OpenAI's "user"): it goes on the request's
	// log lines, so abuse or a bad answer can be traced to whom it was served.
	user string
	// tools are the tools a chat request offers (nil: none).
	tools *toolRequest
}

// prepared is a validated, tokenized request ready for the backend.
type prepared struct {
	served    *Model
	req       *decodev1.GenerateRequest
	promptLen int
	maxTokens int
	stops     []string
	user      string
	// parser reads tool calls from the reply (nil: the reply is text only);
	// markers are its control tokens, rendered as text for it to see.
	parser  toolcall.Parser
	markers map[uint32]string
}

// prepare validates r against the model and turns it into a decode request.
func (f *Frontend) prepare(ctx context.Context, r *genRequest) (*prepared, error) {
	m := r.served
	if m == nil {
		var err error
		if m, err = f.current(); err != nil {
			return nil, err
		}
	}
	tok := m.Tokenizer
	if r.model != "" && r.model != m.ID {
		return nil, modelNotFound(r.model, m.ID)
	}
	if t := r.temperature; t != nil && !(*t >= 0 && *t <= 2) {
		return nil, invalidField("temperature", "temperature %v is out of range; it must be between 0 and 2", *t)
	}
	if p := r.topP; p != nil && !(*p > 0 && *p <= 1) {
		return nil, invalidField("top_p", "top_p %v is out of range; it must be greater than 0 and at most 1", *p)
	}
	if r.maxTokens < 0 || r.maxTokens > int64(m.ContextLength) {
		return nil, invalidField(r.maxTokensParam, "%s %d is out of range; it must be between 1 and the model's context length %d",
			r.maxTokensParam, r.maxTokens, m.ContextLength)
	}
	stops := make([]string, 0, len(r.stops)+1)
	for _, s := range r.stops {
		// An empty stop string would match before any output; OpenAI ignores it too.
		if s != "" && !slices.Contains(stops, s) {
			stops = append(stops, s)
		}
	}
	if len(stops) > maxStops {
		return nil, invalidField("stop", "%d stop sequences given; at most %d are allowed", len(stops), maxStops)
	}

	ids := r.promptIDs
	switch {
	case r.isChat:
		if len(r.messages) == 0 {
			return nil, invalidField("messages", "messages must contain at least one message")
		}
		// The template's own markers (<|im_start|>, [INST], ...) become the model's
		// special tokens; the messages' contents are plain text.
		var err error
		if ids, err = f.chatPromptIDs(ctx, m, r.messages, r.tools); err != nil {
			return nil, err
		}
		for _, s := range m.Template.StopStrings() {
			if !slices.Contains(stops, s) {
				stops = append(stops, s)
			}
		}
	case ids == nil:
		_, span := spans.Start(ctx, "frontend.tokenize")
		ids = withBOS(tok, tok.Encode(r.prompt))
		endTokenize(span, ids)
	default:
		// Token ids are taken as given, BOS or not, as vLLM does.
		for i, id := range ids {
			if int(id) >= tok.VocabSize() {
				return nil, invalidField("prompt", "prompt token %d at index %d is outside the vocabulary of %d tokens", id, i, tok.VocabSize())
			}
		}
	}
	if len(ids) == 0 {
		return nil, invalidField(r.promptParam, "%s must not be empty", r.promptParam)
	}
	room := m.ContextLength - len(ids)
	if room < 1 {
		return nil, invalidField(r.promptParam,
			"the prompt is %d tokens but the model's context length is %d tokens, which leaves no room for output; shorten the %s",
			len(ids), m.ContextLength, r.promptParam)
	}
	// An explicit budget that does not fit is refused, as OpenAI and vLLM do: the
	// client asked for more than it can get and should know now, not from a short
	// answer. The default budget is capped instead; the finish reason "length" says
	// when it ran out.
	maxTokens := min(f.cfg.DefaultMaxTokens, room)
	if r.maxTokens > 0 {
		if int(r.maxTokens) > room {
			e := invalidField(r.maxTokensParam,
				"the model's context length is %d tokens, but %d tokens were requested (%d in the %s, %d in %s); reduce the %s or %s",
				m.ContextLength, len(ids)+int(r.maxTokens), len(ids), r.promptParam, r.maxTokens, r.maxTokensParam, r.promptParam, r.maxTokensParam)
			e.oaiCode = "context_length_exceeded"
			return nil, e
		}
		maxTokens = int(r.maxTokens)
	}

	stopIDs := tok.StopTokens()
	if r.ignoreEOS {
		stopIDs = nil
	}
	sp := &workerv1.SamplingParams{Temperature: f.cfg.DefaultTemperature, TopP: 1}
	if r.temperature != nil {
		sp.Temperature = float32(*r.temperature)
	}
	if r.topP != nil {
		sp.TopP = float32(*r.topP)
	}
	sp.Logprobs, sp.TopLogprobs = r.logprobs, uint32(r.topLogprobs)
	if err := r.controls.apply(sp, tok.VocabSize()); err != nil {
		return nil, err
	}
	stopIDs = r.controls.withStops(stopIDs)
	if r.seed != nil {
		sp.Seed = *r.seed
	} else {
		// Deterministic only when the client asks for it by giving a seed.
		sp.Seed = rand.Uint64()
	}
	var parser toolcall.Parser
	var markers map[uint32]string
	if r.tools.parses() {
		parser, _ = f.toolParser(m)
		markers = markerTokens(tok, parser)
		if r.tools.enforced() {
			// The reply must be a call, so a response_format (which shapes text
			// answers) has nothing to apply to in this turn.
			c := parser.Constraint(r.tools.allowed(), r.tools.parallel)
			sp.Constraint = &workerv1.Constraint{JsonSchema: c.JSONSchema, Prefix: c.Prefix, Suffix: c.Suffix,
				Repeat: c.Repeat, Separator: c.Separator}
		}
	}
	// Compiled here (cached), so a schema outside the subset, the client's or a
	// tool's parameters, is a 400 before any worker sees it.
	field := "response_format"
	if r.tools.enforced() {
		field = "tools"
	}
	if err := f.checkConstraint(sp.Constraint, field); err != nil {
		return nil, err
	}
	return &prepared{
		parser: parser, markers: markers,
		served: m,
		req: &decodev1.GenerateRequest{
			RequestId:      r.requestID,
			PromptTokenIds: ids,
			Sampling:       sp,
			MaxTokens:      uint32(maxTokens),
			StopTokenIds:   stopIDs,
			Explain:        r.explain,
		},
		promptLen: len(ids),
		maxTokens: maxTokens,
		stops:     stops,
		user:      r.user,
	}, nil
}

// prefillInfo says where the request ran and how its prompt was prefilled; it is
// the body of the "tandem" extension field.
type prefillInfo struct {
	Path          string `json:"prefill_path"`
	Reason        string `json:"prefill_reason,omitempty"`
	Detail        string `json:"prefill_detail,omitempty"`
	DecodeWorker  string `json:"decode_worker,omitempty"`
	PrefillWorker string `json:"prefill_worker,omitempty"`
	RouteReason   string `json:"route_reason,omitempty"`
	// ToolCallParser is the parser the reply was read with, when it was.
	ToolCallParser string `json:"tool_call_parser,omitempty"`
}

// usage is the exact token accounting of one request.
type usage struct {
	prompt, completion, cached int
}

// generation is one request in flight on the backend.
type generation struct {
	f         *Frontend
	requestID string
	tok       tokenizer.Tokenizer
	stream    TokenStream
	info      prefillInfo
	// decision is the decode worker's, and routeCachedBlocks the prefix the
	// router believed it held, for the request's Outcome.
	decision          *decodev1.PrefillDecision
	routeCachedBlocks int
	log               *slog.Logger
	started           time.Time

	promptLen int
	maxTokens int
	// stopIDs are the tokens that end the answer, as the request was sent.
	stopIDs []uint32
	detok   *tokenizer.Detokenizer
	stops   stopMatcher

	pending      *decodev1.GenerateResponse
	generated    int
	cached       int
	backendUsage *decodev1.Usage
	firstToken   time.Time
	lastToken    time.Time
	finish       string
	released     bool
	// span is the request's span (the HTTP or Connect server's), which hears how the stream ended.
	span trace.Span
	// lps are the logprobs of tokens consumed since the last takeLogprobs, when
	// the request asked (wantLP).
	wantLP bool
	lps    []tokenLogprob
	// markers are control tokens rendered as their text for the tool-call parser.
	markers map[uint32]string
}

// takeLogprobs returns the logprobs gathered since the last call.
func (g *generation) takeLogprobs() []tokenLogprob {
	lps := g.lps
	g.lps = nil
	return lps
}

// start sends p to the backend and waits for its first response, which carries the
// prefill decision: HTTP needs it for a response header, and headers go before the
// body.
func (f *Frontend) start(ctx context.Context, p *prepared, log *slog.Logger, started time.Time) (*generation, error) {
	if p.user != "" {
		log = log.With("user", logSafe(p.user, maxLoggedUser))
	}
	// A client gone before the first token is routine, not a failure; it is said
	// before the backend stream closes, which is what tests wait for.
	wentAway := func(err error) {
		if ctx.Err() != nil {
			log.Info("client went away before the answer", "err", err)
		}
	}
	stream, route, err := f.backend.Generate(ctx, p.req)
	if err != nil {
		wentAway(err)
		return nil, backendError(err)
	}
	first, err := stream.Recv()
	if err != nil {
		wentAway(err)
		_ = stream.Close()
		if errors.Is(err, io.EOF) {
			return nil, &apiError{code: connect.CodeInternal, upstream: true, msg: "backend: stream ended before its first response"}
		}
		return nil, backendError(err)
	}
	detok := tokenizer.NewDetokenizer(p.served.Tokenizer)
	if onlySpecial(p.served.Tokenizer, p.req.GetPromptTokenIds()) {
		// Nothing but BOS before it: the output starts the text, and a SentencePiece
		// tokenizer's leading space is not part of it (as Decode drops it too).
		detok.StartOfText()
	}
	g := &generation{
		f: f, requestID: p.req.GetRequestId(), tok: p.served.Tokenizer, stream: stream, log: log, started: started,
		decision: first.GetPrefill(), routeCachedBlocks: int(route.GetDecodeCachedBlocks()),
		promptLen: p.promptLen, maxTokens: p.maxTokens, stopIDs: p.req.GetStopTokenIds(),
		detok:   detok,
		wantLP:  p.req.GetSampling().GetLogprobs(),
		stops:   stopMatcher{stops: p.stops},
		markers: p.markers,
		pending: first,
		span:    trace.SpanFromContext(ctx),
	}
	g.info = describe(first, route)
	if d := first.GetPrefill(); d != nil {
		g.cached = int(d.GetCachedTokens())
	}
	f.metrics.prefillPath.WithLabelValues(g.info.Path).Inc()
	log.Info("generation started", "prefill_path", g.info.Path, "prefill_reason", g.info.Reason,
		"decode_worker", g.info.DecodeWorker, "prefill_worker", g.info.PrefillWorker,
		"prompt_tokens", p.promptLen, "max_tokens", p.maxTokens)
	return g, nil
}

func describe(first *decodev1.GenerateResponse, route *routerv1.RouteResponse) prefillInfo {
	d := first.GetPrefill()
	info := prefillInfo{
		Path:          d.GetPath().Name(),
		Reason:        d.GetReason(),
		Detail:        d.GetDetail(),
		PrefillWorker: d.GetPrefillWorkerId(),
		DecodeWorker:  first.GetWorkerId(),
		RouteReason:   route.GetReason(),
	}
	if info.DecodeWorker == "" {
		info.DecodeWorker = route.GetDecodeWorker().GetId()
	}
	return info
}

// next returns the next piece of text. On the last piece done is true and
// g.finish holds "stop" or "length". Text is never empty unless done.
func (g *generation) next() (text string, done bool, err error) {
	if g.finish != "" {
		return "", true, nil
	}
	for {
		resp := g.pending
		g.pending = nil
		if resp == nil {
			resp, err = g.stream.Recv()
			if errors.Is(err, io.EOF) {
				return "", false, &apiError{code: connect.CodeInternal, upstream: true, msg: "backend: stream ended without a finish reason"}
			}
			if err != nil {
				return "", false, backendError(err)
			}
		}
		text, err := g.consume(resp)
		if err != nil {
			return "", false, err
		}
		if g.finish != "" {
			// Release the decode worker before the client sees the end: after a
			// stop string it is still generating tokens nobody will read.
			g.release()
		}
		if text != "" || g.finish != "" {
			return text, g.finish != "", nil
		}
	}
}

func (g *generation) consume(resp *decodev1.GenerateResponse) (string, error) {
	if u := resp.GetUsage(); u != nil {
		g.backendUsage = u
	}
	// The engine's own text, when it sent one, is the answer exactly; the ids are
	// then a guess, neither detokenized nor checked for stop tokens.
	texts := resp.GetTokenTexts()
	engineText := len(texts) > 0
	if engineText && len(texts) != len(resp.GetTokenIds()) {
		return "", &apiError{code: connect.CodeInternal, upstream: true,
			msg: fmt.Sprintf("backend: %d token texts for %d token ids", len(texts), len(resp.GetTokenIds()))}
	}
	var sb strings.Builder
	for i, id := range resp.GetTokenIds() {
		if i == 0 {
			g.lastToken = time.Now()
			if g.firstToken.IsZero() {
				g.firstToken = g.lastToken
			}
		}
		g.generated++
		// The backend should not emit its stop tokens, but if it does they end
		// the output rather than leak into it.
		if !engineText && slices.Contains(g.stopIDs, id) {
			g.finish = "stop"
			break
		}
		if g.wantLP {
			var lp *workerv1.TokenLogprobs
			if i < len(resp.GetLogprobs()) {
				lp = resp.GetLogprobs()[i]
			}
			tlp := logprobOf(g.tok, id, lp)
			if engineText {
				tlp.text, tlp.bytes = texts[i], []byte(texts[i])
			}
			g.lps = append(g.lps, tlp)
		}
		var piece string
		switch marker, ok := g.markers[id]; {
		case engineText:
			piece = texts[i]
		case ok:
			piece = g.detok.Flush() + marker
		default:
			piece = g.detok.Add(id)
		}
		out, stopped := g.stops.push(piece)
		sb.WriteString(out)
		if stopped {
			g.finish = "stop"
			return sb.String(), nil
		}
		if g.generated >= g.maxTokens {
			// Enforced here too, so a backend overrunning its budget cannot run
			// past the context the client was promised.
			g.finish = "length"
			break
		}
	}
	if g.finish == "" {
		switch resp.GetFinishReason() {
		case decodev1.FinishReason_FINISH_REASON_STOP:
			g.finish = "stop"
		case decodev1.FinishReason_FINISH_REASON_LENGTH:
			g.finish = "length"
		case decodev1.FinishReason_FINISH_REASON_CANCELLED:
			return "", &apiError{code: connect.CodeUnavailable, upstream: true, msg: "backend: the decode worker cancelled the request"}
		}
	}
	if g.finish != "" {
		out, stopped := g.stops.push(g.detok.Flush())
		sb.WriteString(out)
		if stopped {
			g.finish = "stop"
		} else {
			sb.WriteString(g.stops.flush())
		}
	}
	return sb.String(), nil
}

// usage is exact: the prompt count is the frontend's own tokenization after the
// template, and the completion count is the tokens received, or the backend's count
// if larger (it may count a stop token it drew but did not send).
func (g *generation) usage() usage {
	u := usage{prompt: g.promptLen, completion: g.generated, cached: g.cached}
	if b := g.backendUsage; b != nil {
		u.completion = max(u.completion, int(b.GetCompletionTokens()))
		u.cached = int(b.GetCachedTokens())
	}
	return u
}

// release closes the backend stream once.
func (g *generation) release() {
	if g.released {
		return
	}
	g.released = true
	if err := g.stream.Close(); err != nil {
		g.log.Debug("closing backend stream", "err", err)
	}
}

// close releases the backend stream (cancelling the request if it still runs, as
// after a stop string) and records the request's metrics.
func (g *generation) close(endpoint string) {
	g.release()
	u := g.usage()
	m := g.f.metrics
	m.promptTokens.Add(float64(u.prompt))
	m.generationTokens.Add(float64(u.completion))
	o := g.outcome(endpoint, time.Now())
	if o.TTFT > 0 {
		m.ttft.WithLabelValues(endpoint).Observe(o.TTFT.Seconds())
	}
	if o.ITL > 0 {
		m.itl.WithLabelValues(endpoint).Observe(o.ITL.Seconds())
	}
	if fn := g.f.outcomes.Load(); fn != nil {
		(*fn)(o)
	}
	streamEnded(g.span, o)
	g.log.Info("generation ended", "finish_reason", g.finish, "prompt_tokens", u.prompt,
		"completion_tokens", u.completion, "cached_tokens", u.cached, "duration", time.Since(g.started))
}

// maxLoggedUser bounds the "user" a log line carries: it is the client's string,
// and a client must not be able to fill the logs with it.
const maxLoggedUser = 256

// logSafe is s cut to at most n bytes, on a character boundary.
func logSafe(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// withBOS puts the tokenizer's BOS token first when the model expects one and the
// text did not already begin with it (a template that writes bos_token itself).
func withBOS(tok tokenizer.Tokenizer, ids []uint32) []uint32 {
	bos, ok := tok.BOS()
	if !ok || !tok.AddBOS() || len(ids) > 0 && ids[0] == bos {
		return ids
	}
	return append([]uint32{bos}, ids...)
}

// onlySpecial reports whether every id is a special token (a BOS-only prompt).
func onlySpecial(tok tokenizer.Tokenizer, ids []uint32) bool {
	for _, id := range ids {
		if !tok.IsSpecial(id) {
			return false
		}
	}
	return true
}
