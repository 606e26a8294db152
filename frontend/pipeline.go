package frontend

import (
	"context"
	"math/rand/v2"
	"slices"
	"unicode/utf8"

	"github.com/tandem-serve/tandem/internal/spans"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
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
	// promptLogprobs asks for the prompt tokens' logprobs too (echo with
	// logprobs); echoOnly answers with the prompt alone (echo, max_tokens 0).
	promptLogprobs, echoOnly bool
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
	// echoOnly: the backend draws one token, which is dropped (echo with max_tokens 0).
	echoOnly bool
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
	if r.echoOnly {
		// The prompt is prefilled and one token drawn and dropped, as vLLM does.
		maxTokens = 1
	} else if r.maxTokens > 0 {
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
			PromptLogprobs: r.promptLogprobs,
		},
		echoOnly:  r.echoOnly,
		promptLen: len(ids),
		maxTokens: maxTokens,
		stops:     stops,
		user:      r.user,
	}, nil
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
