package frontend

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/tandem-serve/tandem/internal/requestid"
	frontendv1 "github.com/tandem-serve/tandem/proto/tandem/frontend/v1"
)

// Generate implements frontendv1connect.FrontendServiceHandler. The first message
// carries the request id and prefill path, the middle ones text, the last the
// finish reason and usage.
func (f *Frontend) Generate(ctx context.Context, req *connect.Request[frontendv1.GenerateRequest],
	stream *connect.ServerStream[frontendv1.GenerateResponse]) (err error) {
	const endpoint = "connect_generate"
	rc := f.connectCtx(ctx, req.Header().Get(requestid.Header), endpoint)
	stream.ResponseHeader().Set(requestid.Header, rc.id)
	defer func() { f.countConnect(rc, err) }()

	g, err := f.fromProto(req.Msg, rc.id)
	if err != nil {
		return f.connectError(rc, err)
	}
	p, err := f.prepareTraced(ctx, g)
	if err != nil {
		return f.connectError(rc, err)
	}
	gen, err := f.start(ctx, p, rc.log, rc.start)
	if err != nil {
		return f.connectError(rc, err)
	}
	defer gen.close(endpoint)
	stream.ResponseHeader().Set(HeaderPrefillPath, gen.info.Path)
	if err := stream.Send(&frontendv1.GenerateResponse{RequestId: rc.id, Prefill: gen.info.proto()}); err != nil {
		return err
	}
	for {
		text, done, err := gen.next()
		if err != nil {
			return f.connectError(rc, err)
		}
		msg := &frontendv1.GenerateResponse{Text: text, Logprobs: logprobsProto(gen.takeLogprobs())}
		if done {
			msg.FinishReason, msg.Usage = gen.finish, gen.usage().proto()
		}
		if err := stream.Send(msg); err != nil {
			return err
		}
		if done {
			f.metrics.e2e.WithLabelValues(endpoint).Observe(time.Since(rc.start).Seconds())
			return nil
		}
	}
}

// ListModels implements frontendv1connect.FrontendServiceHandler.
func (f *Frontend) ListModels(ctx context.Context,
	req *connect.Request[frontendv1.ListModelsRequest]) (*connect.Response[frontendv1.ListModelsResponse], error) {
	rc := f.connectCtx(ctx, req.Header().Get(requestid.Header), "connect_list_models")
	f.countConnect(rc, nil)
	var list []*frontendv1.Model
	if m := f.Model(); m != nil {
		list = append(list, &frontendv1.Model{Id: m.ID, ContextLength: uint32(m.ContextLength)})
	}
	resp := connect.NewResponse(&frontendv1.ListModelsResponse{Models: list})
	resp.Header().Set(requestid.Header, rc.id)
	return resp, nil
}

func (f *Frontend) connectCtx(ctx context.Context, givenID, endpoint string) *reqCtx {
	id := requestid.Keep(givenID)
	return &reqCtx{id: id, log: withTrace(ctx, f.log.With("request_id", id, "endpoint", endpoint)), start: time.Now(), endpoint: endpoint}
}

func (f *Frontend) fromProto(m *frontendv1.GenerateRequest, id string) (*genRequest, error) {
	g := &genRequest{
		requestID: id, model: m.GetModel(), maxTokens: int64(m.GetMaxTokens()), maxTokensParam: "max_tokens",
		stops: m.GetStop(), explain: m.GetExplain(), seed: m.Seed, ignoreEOS: m.GetIgnoreEos(),
	}
	switch hasPrompt, hasMessages := m.GetPrompt() != "", len(m.GetMessages()) > 0; {
	case hasPrompt && hasMessages:
		return nil, invalidField("prompt", "set exactly one of prompt and messages, not both")
	case !hasPrompt && !hasMessages:
		return nil, invalidField("prompt", "set exactly one of prompt and messages; both are empty")
	case hasPrompt:
		g.prompt, g.promptParam = m.GetPrompt(), "prompt"
	default:
		g.isChat, g.promptParam = true, "messages"
		for _, msg := range m.GetMessages() {
			g.messages = append(g.messages, Message{Role: msg.GetRole(), Content: msg.GetContent()})
		}
	}
	if m.Temperature != nil {
		t := float64(m.GetTemperature())
		g.temperature = &t
	}
	if m.TopP != nil {
		p := float64(m.GetTopP())
		g.topP = &p
	}
	if m.GetTopLogprobs() > 0 && !m.GetLogprobs() {
		return nil, invalidField("top_logprobs", "top_logprobs needs logprobs set to true")
	}
	if rf := m.GetResponseFormat(); rf != nil {
		var err error
		if g.controls.constraint, err = constraintOf(rf.GetType(), json.RawMessage(rf.GetJsonSchema())); err != nil {
			return nil, err
		}
	}
	top := int64(m.GetTopLogprobs())
	if err := requestLogprobs(g, m.GetLogprobs(), &top, "top_logprobs"); err != nil {
		return nil, err
	}
	return g, nil
}

// logprobsProto is lps as FrontendService carries them: the chat shape, typed.
func logprobsProto(lps []tokenLogprob) []*frontendv1.TokenLogprob {
	if len(lps) == 0 {
		return nil
	}
	out := make([]*frontendv1.TokenLogprob, len(lps))
	for i, lp := range lps {
		e := &frontendv1.TokenLogprob{Token: lp.text, Logprob: lp.logprob, Bytes: lp.bytes}
		for _, t := range lp.top {
			e.TopLogprobs = append(e.TopLogprobs, &frontendv1.TopLogprob{Token: t.text, Logprob: t.logprob, Bytes: t.bytes})
		}
		out[i] = e
	}
	return out
}

func (f *Frontend) connectError(rc *reqCtx, err error) error {
	ae := asAPIError(err)
	if ae.httpStatus() >= 500 {
		rc.log.Warn("request failed", "err", err)
	} else {
		rc.log.Info("request rejected", "param", ae.param, "err", ae.msg)
	}
	return ae.connectError()
}

// countConnect counts a Connect call under the HTTP status its outcome maps to.
func (f *Frontend) countConnect(rc *reqCtx, err error) {
	status := http.StatusOK
	if err != nil {
		status = (&apiError{code: connect.CodeOf(err)}).httpStatus()
	}
	f.metrics.requests.WithLabelValues(rc.endpoint, strconv.Itoa(status)).Inc()
}

// proto is the prefill description as FrontendService carries it. (The decode
// worker's PrefillDecision says more, for the frontend; the frontend's clients
// get this, the same as the OpenAI extension field.)
func (i prefillInfo) proto() *frontendv1.Prefill {
	return &frontendv1.Prefill{
		Path: i.Path, Reason: i.Reason, Detail: i.Detail, DecodeWorkerId: i.DecodeWorker,
		PrefillWorkerId: i.PrefillWorker, RouteReason: i.RouteReason,
	}
}

// proto is the usage as FrontendService carries it.
func (u usage) proto() *frontendv1.Usage {
	return &frontendv1.Usage{PromptTokens: uint32(u.prompt), CompletionTokens: uint32(u.completion), CachedTokens: uint32(u.cached)}
}
