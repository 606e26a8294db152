package frontend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"

	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/tokenizer"
)

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
	// promptLPs are the prompt tokens' logprobs (the first has none), when the
	// request asked for them (echo with logprobs).
	promptLPs []tokenLogprob
	// echoOnly: the answer is the prompt alone (echo with max_tokens 0); the one
	// token the backend draws is not the client's.
	echoOnly bool
	// lpMissing counts tokens the backend sent no logprobs for though asked.
	lpMissing int
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
		detok:    detok,
		wantLP:   p.req.GetSampling().GetLogprobs(),
		stops:    stopMatcher{stops: p.stops},
		markers:  p.markers,
		echoOnly: p.echoOnly,
		pending:  first,
		span:     trace.SpanFromContext(ctx),
	}
	if p.req.GetPromptLogprobs() {
		if g.promptLPs, err = promptLogprobsOf(p.served.Tokenizer, p.req.GetPromptTokenIds(), first.GetPromptLogprobs()); err != nil {
			_ = stream.Close()
			return nil, err
		}
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
		if g.echoOnly {
			// The prompt is the whole answer: what the backend drew is dropped
			// and its stream closed.
			g.finish = "length"
			g.release()
			return "", true, nil
		}
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
			} else {
				g.lpMissing++
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
	if g.echoOnly {
		return u
	}
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
