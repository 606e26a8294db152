package frontend

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
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
	n, err := f.choicesOf(req.Msg, g)
	if err != nil {
		return f.connectError(rc, err)
	}
	if n > 1 {
		return f.generateChoices(ctx, rc, g, n, stream)
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
	tr := f.newToolReply(p, g, rc.log)
	if tr != nil {
		gen.info.ToolCallParser = p.parser.Name()
	}
	if err := stream.Send(&frontendv1.GenerateResponse{RequestId: rc.id, Prefill: gen.info.proto()}); err != nil {
		return err
	}
	for {
		text, done, err := gen.next()
		if err != nil {
			return f.connectError(rc, err)
		}
		msg := &frontendv1.GenerateResponse{Text: text, Logprobs: logprobsProto(gen.takeLogprobs())}
		finish := gen.finish
		if tr != nil {
			deltas := tr.push(text)
			if done {
				var last []chatDelta
				last, finish = tr.close(finish)
				deltas = append(deltas, last...)
			}
			msg.Text, msg.ToolCalls = toolDeltasProto(deltas)
		}
		if done {
			msg.FinishReason, msg.Usage = finish, gen.usage().proto()
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
		ids := map[string]bool{}
		for i, msg := range m.GetMessages() {
			cm := chatMessage{Role: msg.GetRole(), Content: messageContent{Text: msg.GetContent()}, ToolCallID: msg.GetToolCallId()}
			for _, c := range msg.GetToolCalls() {
				tc := toolCallJSON{ID: c.GetId(), Type: "function"}
				tc.Function.Name, tc.Function.Arguments = c.GetName(), c.GetArguments()
				cm.ToolCalls = append(cm.ToolCalls, tc)
			}
			out := Message{Role: cm.Role, Content: cm.Content.Text}
			if err := historyMessage(i, cm, &out, ids); err != nil {
				return nil, err
			}
			g.messages = append(g.messages, out)
		}
	}
	tools, choice, err := toolsFromProto(m)
	if err != nil {
		return nil, err
	}
	if g.tools, err = parseTools(tools, choice, m.ParallelToolCalls); err != nil {
		return nil, err
	}
	if m.Temperature != nil {
		t := float64(m.GetTemperature())
		g.temperature = &t
	}
	if m.TopP != nil {
		p := float64(m.GetTopP())
		g.topP = &p
	}
	if err := controlsFromProto(m, g); err != nil {
		return nil, err
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
		PrefillWorkerId: i.PrefillWorker, RouteReason: i.RouteReason, ToolCallParser: i.ToolCallParser,
	}
}

// proto is the usage as FrontendService carries it.
func (u usage) proto() *frontendv1.Usage {
	return &frontendv1.Usage{PromptTokens: uint32(u.prompt), CompletionTokens: uint32(u.completion), CachedTokens: uint32(u.cached)}
}

// toolsFromProto is a request's tools and tool choice as the OpenAI API has them,
// so that both are checked the same way.
func toolsFromProto(m *frontendv1.GenerateRequest) (*toolsField, toolChoiceField, error) {
	f := &toolsField{}
	for i, t := range m.GetTools() {
		var tj toolJSON
		tj.Type = "function"
		tj.Function = &struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
			Strict      *bool           `json:"strict"`
		}{Name: t.GetName(), Description: t.GetDescription()}
		if p := t.GetParametersJson(); p != "" {
			if !json.Valid([]byte(p)) {
				return nil, toolChoiceField{}, invalidField(fmt.Sprintf("tools[%d].parameters_json", i), "tools[%d].parameters_json is not JSON", i)
			}
			tj.Function.Parameters = json.RawMessage(p)
		}
		raw, err := json.Marshal(tj)
		if err != nil {
			return nil, toolChoiceField{}, err
		}
		f.raw, f.tools = append(f.raw, raw), append(f.tools, tj)
	}
	c := toolChoiceField{set: true}
	switch m.GetToolChoice() {
	case frontendv1.ToolChoice_TOOL_CHOICE_UNSPECIFIED:
		c.set = false
	case frontendv1.ToolChoice_TOOL_CHOICE_NONE:
		c.mode = "none"
	case frontendv1.ToolChoice_TOOL_CHOICE_AUTO:
		c.mode = "auto"
	case frontendv1.ToolChoice_TOOL_CHOICE_REQUIRED:
		c.mode = "required"
	case frontendv1.ToolChoice_TOOL_CHOICE_FUNCTION:
		c.mode, c.name = "function:function", m.GetToolChoiceFunction()
	default:
		return nil, c, invalidField("tool_choice", "tool_choice %d is not a known value", m.GetToolChoice())
	}
	return f, c, nil
}

// toolDeltasProto is deltas as one Connect message: the content joined, the call
// pieces in order.
func toolDeltasProto(deltas []chatDelta) (string, []*frontendv1.ToolCallDelta) {
	var text strings.Builder
	var calls []*frontendv1.ToolCallDelta
	for _, d := range deltas {
		if d.Content != nil {
			text.WriteString(*d.Content)
		}
		for _, c := range d.ToolCalls {
			calls = append(calls, &frontendv1.ToolCallDelta{Index: uint32(*c.Index), Id: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments})
		}
	}
	return text.String(), calls
}
