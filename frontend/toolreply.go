package frontend

import (
	"log/slog"
	"strconv"

	"github.com/tandem-serve/tandem/toolcall"
)

// toolReply reads one reply for tool calls: whole, or streamed into OpenAI's
// chunk format with each call's arguments sent as they are generated.
type toolReply struct {
	f        *Frontend
	parser   toolcall.Parser
	enforced bool
	// parallel false keeps only the first call, as OpenAI's parallel_tool_calls says.
	parallel bool
	log      *slog.Logger
	stream   *toolcall.Stream
	ids      []string // the ids of the calls streamed so far
}

func (f *Frontend) newToolReply(p *prepared, g *genRequest, log *slog.Logger) *toolReply {
	if p.parser == nil {
		return nil
	}
	return &toolReply{f: f, parser: p.parser, enforced: g.tools.enforced(), parallel: g.tools.parallel, log: log, stream: p.parser.Stream()}
}

// whole splits a finished reply into content (nil when there is none beside the
// calls) and calls.
func (t *toolReply) whole(text string) (*string, []toolCallJSON) {
	content, calls, ok := t.parser.Parse(text)
	if !t.parallel && len(calls) > 1 {
		calls = calls[:1]
	}
	t.record(len(calls), !ok, text)
	var out []toolCallJSON
	for _, c := range calls {
		tc := toolCallJSON{ID: toolcall.NewID(t.parser), Type: "function"}
		tc.Function.Name, tc.Function.Arguments = c.Name, c.Arguments
		out = append(out, tc)
	}
	if len(out) > 0 && content == "" {
		return nil, out
	}
	return &content, out
}

// record counts a read reply and logs a malformed one.
func (t *toolReply) record(calls int, malformed bool, text string) {
	enforced := strconv.FormatBool(t.enforced)
	result := "content"
	switch {
	case malformed:
		result = "malformed"
		t.log.Warn("the model began a tool call it did not finish in the parser's format; returned as content",
			"parser", t.parser.Name(), "enforced", t.enforced, "reply", logSafe(text, 512))
	case calls > 0:
		result = "calls"
	}
	t.f.metrics.toolReplies.WithLabelValues(t.parser.Name(), result, enforced).Inc()
	t.f.metrics.toolCalls.WithLabelValues(t.parser.Name(), enforced).Add(float64(calls))
}

// deltas turns stream events into chunk deltas: content runs are joined, each
// call fragment is its own delta.
func (t *toolReply) deltas(evs []toolcall.Event) []chatDelta {
	var out []chatDelta
	for _, e := range evs {
		if !e.IsCall {
			if n := len(out); n > 0 && out[n-1].Content != nil {
				joined := *out[n-1].Content + e.Content
				out[n-1].Content = &joined
				continue
			}
			text := e.Content
			out = append(out, chatDelta{Content: &text})
			continue
		}
		i := e.Index
		if !t.parallel && i > 0 {
			continue
		}
		tc := toolCallJSON{Index: &i}
		if e.Name != "" {
			t.ids = append(t.ids, toolcall.NewID(t.parser))
			tc.ID, tc.Type, tc.Function.Name = t.ids[i], "function", e.Name
		}
		tc.Function.Arguments = e.Args
		out = append(out, chatDelta{ToolCalls: []toolCallJSON{tc}})
	}
	return out
}

// push reads the next piece of a streamed reply.
func (t *toolReply) push(text string) []chatDelta { return t.deltas(t.stream.Push(text)) }

// close ends a streamed reply: what was held back goes out, and the reply is
// counted; finish becomes "tool_calls" when it holds a call and ended on its own.
func (t *toolReply) close(finish string) ([]chatDelta, string) {
	out := t.deltas(t.stream.Close())
	calls := len(t.stream.Calls())
	if !t.parallel {
		calls = min(calls, 1)
	}
	t.record(calls, t.stream.Failed(), t.stream.Content())
	if calls > 0 && finish == "stop" {
		finish = "tool_calls"
	}
	return out, finish
}

// finishReason is finish for a whole reply with calls.
func finishReason(finish string, calls int) string {
	if calls > 0 && finish == "stop" {
		return "tool_calls"
	}
	return finish
}

// wholeTools is the whole response of a reply read for tool calls.
func (c *chatFormat) wholeTools(content *string, calls []toolCallJSON, finish string, u usage, info *prefillInfo, lps []tokenLogprob) any {
	return &chatCompletion{
		ID: c.id, Object: "chat.completion", Created: c.created, Model: c.model,
		Choices: []chatChoice{{Message: chatMessageOut{Role: "assistant", Content: content, ToolCalls: calls},
			FinishReason: finish, Logprobs: chatLogprobsOf(lps)}},
		Usage: u.json(), Tandem: info,
	}
}

// sendDeltas sends one chunk per delta, the tokens' logprobs on the first; with
// no delta but logprobs, an empty content delta carries them.
func (c *chatFormat) sendDeltas(sse *sseWriter, deltas []chatDelta, lps []tokenLogprob) {
	if len(deltas) == 0 && lps != nil {
		empty := ""
		deltas = []chatDelta{{Content: &empty}}
	}
	for i, d := range deltas {
		ch := chatChunkChoice{Delta: d}
		if i == 0 {
			ch.Logprobs = chatLogprobsOf(lps)
		}
		sse.send(c.chunk([]chatChunkChoice{ch}))
	}
}
