// Package trtllm is TensorRT-LLM's dialect of the OpenAI API (trtllm-serve;
// engine/openaihttp), and its disaggregated serving's context and generation legs.
//
// Protocol followed: TensorRT-LLM main of 2026-11 (1.1 and later):
//   - tensorrt_llm/serve/openai_protocol.py: CompletionRequest.disaggregated_params,
//     DisaggregatedParams (request_type, first_gen_tokens, ctx_request_id,
//     encoded_opaque_state, draft_tokens, disagg_request_id, ctx_dp_rank,
//     ctx_info_endpoint, ...), CompletionResponseChoice.disaggregated_params;
//   - tensorrt_llm/serve/postprocess_handlers.py: detokenize=false streams token_ids;
//   - tensorrt_llm/serve/openai_disagg_server.py: the legs;
//   - tensorrt_llm/metrics/collector.py: trtllm_num_requests_running,
//     trtllm_num_requests_waiting, trtllm_kv_cache_utilization,
//     trtllm_kv_cache_max_blocks, served at /prometheus/metrics (/metrics is JSON).
package trtllm

import (
	"context"
	"encoding/json"
	"time"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/openaihttp"
)

// Dialect is TensorRT-LLM's.
func Dialect() openaihttp.Dialect {
	return openaihttp.Dialect{
		Name: "trtllm", MetricsPath: "/prometheus/metrics", HealthPath: "/health",
		Load: openaihttp.LoadMetrics{
			Running: []string{"trtllm_num_requests_running"}, Waiting: []string{"trtllm_num_requests_waiting"},
			KVUsage: []string{"trtllm_kv_cache_utilization"}, TotalBlocks: []string{"trtllm_kv_cache_max_blocks"},
		},
		AskTokenIDs: func(b *openaihttp.CompletionRequest) {
			no := false
			b.Detokenize = &no
		},
		Disagg:    ContextGeneration{},
		Constrain: Constrain,
	}
}

// Constrain sets response_format (openai_protocol.py's ResponseFormat, TensorRT-LLM
// 1.1 and later; the server needs guided_decoding_backend set, xgrammar for
// structural tags): {"type":"json","schema":...}, or, with a prefix, suffix or
// repetition, {"type":"structural_tag","format":...}.
func Constrain(b *openaihttp.CompletionRequest, c *engine.Constraint) {
	if openaihttp.Plain(c) {
		b.ResponseFormat = &openaihttp.ResponseFormat{Type: "json", Schema: openaihttp.SchemaJSON(c)}
		return
	}
	b.ResponseFormat = &openaihttp.ResponseFormat{Type: "structural_tag", Format: openaihttp.StructuralTagFormat(c)}
}

// ContextGeneration is the context-only and generation-only legs. The servers
// run with a cache_transceiver_config (UCX or NIXL backend).
type ContextGeneration struct{}

// contextOnly is the context leg's disaggregated_params.
type contextOnly struct {
	RequestType string `json:"request_type"`
}

// Prefill posts the prompt as a context-only request for one token; the
// answer's choices[0].disaggregated_params are the generation leg's. The
// generation server continues from first_gen_tokens, which they carry.
func (ContextGeneration) Prefill(ctx context.Context, e *openaihttp.Engine, req engine.Request,
	body openaihttp.CompletionRequest) (engine.RefExport, error) {
	p, err := json.Marshal(contextOnly{RequestType: "context_only"})
	if err != nil {
		return nil, err
	}
	body.DisaggregatedParams, body.MaxTokens, body.Stream, body.StreamOptions = p, 1, false, nil
	start := time.Now()
	resp, err := e.Complete(ctx, req.ID, body)
	if err != nil {
		return nil, err
	}
	if len(resp.Choices) == 0 || !openaihttp.Present(resp.Choices[0].DisaggregatedParams) {
		return nil, engine.ErrNoTransferParams
	}
	return &openaihttp.Done{P: resp.Choices[0].DisaggregatedParams, Took: time.Since(start)}, nil
}

// Decode passes the context leg's parameters with request_type
// "generation_only", the rest verbatim. The prompt is the same token ids the
// context leg was given, which its prompt_token_ids echo.
func (ContextGeneration) Decode(body *openaihttp.CompletionRequest, params []byte) error {
	p, err := openaihttp.SetField(params, "request_type", "generation_only")
	if err != nil {
		return err
	}
	body.DisaggregatedParams = p
	return nil
}
