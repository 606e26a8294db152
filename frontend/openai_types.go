package frontend

import (
	"bytes"
	"encoding/json"
	"reflect"
)

// The OpenAI request bodies, decoded into typed structs. Unknown fields are ignored
// (clients send many we do not use); fields that may take several JSON shapes have
// their own types that accept each shape and reject the rest as a type error, which
// encoding/json attributes to the field.

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// samplingFields are the fields chat and completions requests share.
type samplingFields struct {
	Model               string         `json:"model"`
	MaxTokens           *int64         `json:"max_tokens"`
	MaxCompletionTokens *int64         `json:"max_completion_tokens"`
	Temperature         *float64       `json:"temperature"`
	TopP                *float64       `json:"top_p"`
	Seed                *int64         `json:"seed"`
	Stop                stopField      `json:"stop"`
	N                   *int64         `json:"n"`
	User                string         `json:"user"`
	Stream              bool           `json:"stream"`
	StreamOptions       *streamOptions `json:"stream_options"`
	// IgnoreEOS is vLLM's extension: the model's end-of-sequence tokens do not
	// end the answer, so it runs to max_tokens (benchmarks that need exact output
	// lengths send it). Stop strings still apply.
	IgnoreEOS bool `json:"ignore_eos"`
	// Penalties and logit bias as OpenAI defines them; repetition_penalty, min_p,
	// stop_token_ids and top_k are vLLM's extensions, with vLLM's meaning.
	PresencePenalty   *float64           `json:"presence_penalty"`
	FrequencyPenalty  *float64           `json:"frequency_penalty"`
	RepetitionPenalty *float64           `json:"repetition_penalty"`
	LogitBias         map[string]float64 `json:"logit_bias"`
	MinP              *float64           `json:"min_p"`
	StopTokenIDs      []uint32           `json:"stop_token_ids"`
	// TopK is vLLM's: draw from the k most likely tokens only; 0 or -1 is no cut.
	TopK *int64 `json:"top_k"`
	// ResponseFormat asks for JSON, enforced by constrained decoding.
	ResponseFormat *responseFormatField `json:"response_format"`
	unsupportedFields
	// echo is completionRequest.Echo, for toGen (max_tokens 0 is allowed with it).
	echo bool
}

type chatRequest struct {
	samplingFields
	Messages    []chatMessage `json:"messages"`
	Logprobs    *bool         `json:"logprobs"`
	TopLogprobs *int64        `json:"top_logprobs"`
	// Tools and ToolChoice shadow unsupportedFields' (a shallower field wins in
	// encoding/json), which still refuse them on /v1/completions.
	Tools             toolsField      `json:"tools"`
	ToolChoice        toolChoiceField `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
}

type completionRequest struct {
	samplingFields
	Prompt promptField `json:"prompt"`
	// Logprobs is the number of alternatives per token (0 for the chosen one only).
	Logprobs *int64 `json:"logprobs"`
	// BestOf and Echo shadow unsupportedFields' (a shallower field wins in
	// encoding/json), which still refuse them on /v1/chat/completions.
	BestOf *int64 `json:"best_of"`
	Echo   bool   `json:"echo"`
}

type chatMessage struct {
	Role       string         `json:"role"`
	Content    messageContent `json:"content"`
	Name       string         `json:"name"`
	ToolCalls  []toolCallJSON `json:"tool_calls"`
	ToolCallID string         `json:"tool_call_id"`
}

// messageContent is a string, an array of {type, text} parts, or null (an
// assistant turn that only called tools).
type messageContent struct {
	Text string
	// badPart is the index of the first part that is not text, when hasBad.
	badPart  int
	hasBad   bool
	partType string
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func (c *messageContent) UnmarshalJSON(b []byte) error {
	switch firstByte(b) {
	case 'n':
		return nil
	case '"':
		return json.Unmarshal(b, &c.Text)
	case '[':
		var parts []contentPart
		if err := json.Unmarshal(b, &parts); err != nil {
			return err
		}
		var buf bytes.Buffer
		for i, p := range parts {
			if p.Type != "text" {
				if !c.hasBad {
					c.badPart, c.partType, c.hasBad = i, p.Type, true
				}
				continue
			}
			buf.WriteString(p.Text)
		}
		c.Text = buf.String()
		return nil
	}
	return typeError(b, reflect.TypeFor[string]())
}

// stopField is a string, an array of strings, or null.
type stopField []string

func (s *stopField) UnmarshalJSON(b []byte) error {
	switch firstByte(b) {
	case 'n':
		*s = nil
		return nil
	case '"':
		var one string
		if err := json.Unmarshal(b, &one); err != nil {
			return err
		}
		*s = stopField{one}
		return nil
	case '[':
		var many []string
		if err := json.Unmarshal(b, &many); err != nil {
			return err
		}
		*s = many
		return nil
	}
	return typeError(b, reflect.TypeFor[[]string]())
}

// promptField is what /v1/completions accepts as a prompt: a string, token ids, or
// a batch of either; Text and IDs are the first prompt, Texts and IDSets all of a batch.
type promptField struct {
	Text    string
	IDs     []uint32
	IsIDs   bool
	Count   int
	Present bool
	Texts   []string
	IDSets  [][]uint32
}

func (p *promptField) UnmarshalJSON(b []byte) error {
	p.Present = true
	switch firstByte(b) {
	case 'n':
		p.Present = false
		return nil
	case '"':
		p.Count = 1
		return json.Unmarshal(b, &p.Text)
	case '[':
	default:
		return typeError(b, reflect.TypeFor[string]())
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if len(raw) == 0 {
		return nil
	}
	switch firstByte(raw[0]) {
	case '"':
		var many []string
		if err := json.Unmarshal(b, &many); err != nil {
			return err
		}
		p.Count = len(many)
		p.Text, p.Texts = many[0], many
	case '[':
		var many [][]uint32
		if err := json.Unmarshal(b, &many); err != nil {
			return err
		}
		p.Count, p.IsIDs, p.IDs, p.IDSets = len(many), true, many[0], many
	default:
		if err := json.Unmarshal(b, &p.IDs); err != nil {
			return err
		}
		p.Count, p.IsIDs = 1, true
	}
	return nil
}

func firstByte(b []byte) byte {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

func typeError(b []byte, want reflect.Type) error {
	return &json.UnmarshalTypeError{Value: jsonKind(b), Type: want}
}

func jsonKind(b []byte) string {
	switch c := firstByte(b); {
	case c == '{':
		return "object"
	case c == 't' || c == 'f':
		return "bool"
	case c == '-' || (c >= '0' && c <= '9'):
		return "number"
	default:
		return "value"
	}
}

// Responses.

type usageJSON struct {
	PromptTokens        int                 `json:"prompt_tokens"`
	CompletionTokens    int                 `json:"completion_tokens"`
	TotalTokens         int                 `json:"total_tokens"`
	PromptTokensDetails promptTokensDetails `json:"prompt_tokens_details"`
}

type promptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

func (u usage) json() *usageJSON {
	return &usageJSON{
		PromptTokens: u.prompt, CompletionTokens: u.completion, TotalTokens: u.prompt + u.completion,
		PromptTokensDetails: promptTokensDetails{CachedTokens: u.cached},
	}
}

type chatMessageOut struct {
	Role string `json:"role"`
	// Content is null when the reply is only tool calls, as OpenAI sends it.
	Content   *string        `json:"content"`
	ToolCalls []toolCallJSON `json:"tool_calls,omitempty"`
}

type chatChoice struct {
	Index        int            `json:"index"`
	Message      chatMessageOut `json:"message"`
	FinishReason string         `json:"finish_reason"`
	Logprobs     *chatLogprobs  `json:"logprobs"`
}

type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *usageJSON   `json:"usage"`
	Tandem  *prefillInfo `json:"tandem,omitempty"`
}

type chatDelta struct {
	Role      string         `json:"role,omitempty"`
	Content   *string        `json:"content,omitempty"`
	ToolCalls []toolCallJSON `json:"tool_calls,omitempty"`
}

type chatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        chatDelta     `json:"delta"`
	FinishReason *string       `json:"finish_reason"`
	Logprobs     *chatLogprobs `json:"logprobs"`
}

type chatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []chatChunkChoice `json:"choices"`
	Usage   *usageJSON        `json:"usage,omitempty"`
	Tandem  *prefillInfo      `json:"tandem,omitempty"`
}

type completionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	FinishReason *string             `json:"finish_reason"`
	Logprobs     *completionLogprobs `json:"logprobs"`
}

// completion is both the /v1/completions response and its stream chunks; OpenAI
// uses one shape, object "text_completion", for both.
type completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usageJSON         `json:"usage,omitempty"`
	Tandem  *prefillInfo       `json:"tandem,omitempty"`
}

type modelJSON struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	MaxModelLen int    `json:"max_model_len"`
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelJSON `json:"data"`
}
