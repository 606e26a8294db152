package openaihttp

import "encoding/json"

// The OpenAI completions API as the three engines serve it, with the fields each
// adds. Sources, by field:
//   - vLLM: vllm/entrypoints/openai/completion/protocol.py (CompletionRequest,
//     CompletionResponse, CompletionStreamResponse; main of 2026-11): prompt as a
//     list of token ids, stop_token_ids, return_token_ids (since v0.10.2, PR
//     #22587), return_tokens_as_token_ids with logprobs, kv_transfer_params.
//   - TensorRT-LLM: tensorrt_llm/serve/openai_protocol.py (CompletionRequest,
//     DisaggregatedParams, CompletionResponseStreamChoice; main of 2026-11):
//     detokenize=false streams token_ids instead of text
//     (tensorrt_llm/serve/postprocess_handlers.py), disaggregated_params.
//   - SGLang: python/sglang/srt/entrypoints/openai/protocol.py (CompletionRequest;
//     main of 2026-11): return_token_ids, bootstrap_host, bootstrap_port,
//     bootstrap_room, rid.

// CompletionRequest is the body tandem posts to /v1/completions. Optional fields
// are pointers or omitted when empty, so that an engine that does not know one
// never sees it.
type CompletionRequest struct {
	Model string `json:"model"`
	// Prompt is token ids: the engine's cache then sees exactly the tokens
	// tandem's prefix hashes were computed over.
	Prompt        []uint32       `json:"prompt"`
	MaxTokens     int            `json:"max_tokens"`
	Temperature   float32        `json:"temperature"`
	TopP          *float32       `json:"top_p,omitempty"`
	TopK          *int           `json:"top_k,omitempty"`
	Seed          *int64         `json:"seed,omitempty"`
	Stream        bool           `json:"stream"`
	StreamOptions *StreamOptions `json:"stream_options,omitempty"`
	StopTokenIDs  []uint32       `json:"stop_token_ids,omitempty"`
	// IgnoreEOS is set when the request's stop tokens leave out the model's EOS
	// (none at all, or a client's own stop_token_ids with ignore_eos): tandem lists
	// every token that ends a generation, and an engine server left to itself would
	// still stop at its model's EOS (vLLM, SGLang and TensorRT-LLM all take it).
	IgnoreEOS bool `json:"ignore_eos,omitempty"`
	Logprobs  *int `json:"logprobs,omitempty"`
	// PromptLogprobs asks for the prompt tokens' logprobs with that many
	// alternatives (vLLM; never with stream).
	PromptLogprobs *int `json:"prompt_logprobs,omitempty"`
	// Penalties, bias and min_p under the names vLLM, SGLang and TensorRT-LLM take;
	// zero (1 for repetition_penalty) is each one's default, so it is left out.
	PresencePenalty   float32            `json:"presence_penalty,omitempty"`
	FrequencyPenalty  float32            `json:"frequency_penalty,omitempty"`
	RepetitionPenalty float32            `json:"repetition_penalty,omitempty"`
	LogitBias         map[string]float32 `json:"logit_bias,omitempty"`
	MinP              float32            `json:"min_p,omitempty"`

	// A constraint (structured outputs) in the engine's own field, set by its
	// Dialect.Constrain: vLLM's structured_outputs, SGLang's json_schema, or
	// response_format (TensorRT-LLM's JSON, and both engines' structural tag).
	StructuredOutputs *StructuredOutputs `json:"structured_outputs,omitempty"`
	JSONSchema        string             `json:"json_schema,omitempty"`
	ResponseFormat    *ResponseFormat    `json:"response_format,omitempty"`

	// Token ids back (vLLM >= 0.10.2, SGLang).
	ReturnTokenIDs *bool `json:"return_token_ids,omitempty"`
	// Logprobs' tokens as "token_id:N" (vLLM).
	ReturnTokensAsTokenIDs *bool `json:"return_tokens_as_token_ids,omitempty"`
	// TensorRT-LLM: false streams token_ids and no text.
	Detokenize *bool `json:"detokenize,omitempty"`

	// vLLM's KV connector parameters (NixlConnector), opaque.
	KVTransferParams json.RawMessage `json:"kv_transfer_params,omitempty"`
	// TensorRT-LLM's disaggregation parameters, opaque.
	DisaggregatedParams json.RawMessage `json:"disaggregated_params,omitempty"`
	// SGLang's PD disaggregation: the prefill server's bootstrap server and the
	// room both servers meet in.
	BootstrapHost string  `json:"bootstrap_host,omitempty"`
	BootstrapPort int     `json:"bootstrap_port,omitempty"`
	BootstrapRoom *uint64 `json:"bootstrap_room,omitempty"`
}

// StreamOptions asks for the usage in the stream's last chunk.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// CompletionResponse is a non-streamed answer, and one chunk of a streamed one.
type CompletionResponse struct {
	ID      string   `json:"id"`
	Choices []Choice `json:"choices"`
	Usage   *Usage   `json:"usage"`
	// vLLM: the prefill leg's KV connector parameters, for the decode leg.
	KVTransferParams json.RawMessage `json:"kv_transfer_params"`
	// An error reported inside a stream (vLLM sends one as a data event).
	Error *APIError `json:"error"`
}

// Choice is one completion, or its delta in a stream.
type Choice struct {
	Index        int       `json:"index"`
	Text         string    `json:"text"`
	TokenIDs     []uint32  `json:"token_ids"`
	Logprobs     *Logprobs `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
	// TensorRT-LLM: the context leg's parameters, for the generation leg.
	DisaggregatedParams json.RawMessage `json:"disaggregated_params"`
	// vLLM: per prompt token (null for the first), its logprob and the top
	// alternatives', keyed by token id.
	PromptLogprobs []map[string]*PromptLogprob `json:"prompt_logprobs"`
}

// PromptLogprob is one entry of vLLM's prompt_logprobs (vllm/logprobs.py's Logprob).
type PromptLogprob struct {
	Logprob      float64 `json:"logprob"`
	Rank         int     `json:"rank"`
	DecodedToken string  `json:"decoded_token"`
}

// Logprobs are the legacy completions logprobs: per token, its text (or
// "token_id:N") and log-probability, and the top alternatives by text.
type Logprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float64           `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
}

// Usage counts a completion's tokens.
type Usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// APIError is an OpenAI error object.
type APIError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    any    `json:"code"`
}

// ModelList is /v1/models.
type ModelList struct {
	Data []Model `json:"data"`
}

// Model is one served model. MaxModelLen is vLLM's and SGLang's addition.
type Model struct {
	ID          string `json:"id"`
	Root        string `json:"root"`
	MaxModelLen int    `json:"max_model_len"`
}
