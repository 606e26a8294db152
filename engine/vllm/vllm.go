// Package vllm is vLLM's dialect of the OpenAI API (engine/openaihttp), and its
// disaggregated prefill over the NixlConnector.
//
// Protocol followed: vLLM main of 2026-11 (v0.11 and later):
//   - vllm/entrypoints/openai/completion/protocol.py: return_token_ids (v0.10.2+),
//     return_tokens_as_token_ids, kv_transfer_params in the request and the response;
//     prompt_logprobs (not with stream) and choices[].prompt_logprobs, a list of
//     {token id: {logprob, rank, decoded_token}} with null first;
//   - tests/v1/kv_connector/nixl_integration/toy_proxy_server.py: the two legs;
//   - vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py and
//     docs/features/nixl_connector_usage.md: the parameters' meaning;
//   - vllm/v1/metrics/loggers.py: vllm:num_requests_running, vllm:num_requests_waiting,
//     vllm:kv_cache_usage_perc (vllm:gpu_cache_usage_perc before v0.10),
//     vllm:cache_config_info.
package vllm

import (
	"context"
	"encoding/json"
	"time"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/openaihttp"
)

// Dialect is vLLM's.
func Dialect() openaihttp.Dialect {
	return openaihttp.Dialect{
		Name: "vllm", MetricsPath: "/metrics", HealthPath: "/health",
		Load: openaihttp.LoadMetrics{
			Running: []string{"vllm:num_requests_running"}, Waiting: []string{"vllm:num_requests_waiting"},
			KVUsage:     []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
			TotalBlocks: []string{"vllm:cache_config_info"}, TotalBlocksLabel: "num_gpu_blocks",
			PrefixQueries: []string{"vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"},
			PrefixHits:    []string{"vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"},
		},
		AskTokenIDs: func(b *openaihttp.CompletionRequest) {
			yes := true
			b.ReturnTokenIDs = &yes
		},
		LogprobTokenIDs: true,
		Disagg:          Nixl{},
		Constrain:       Constrain,
		PromptLogprobs:  true,
	}
}

// Constrain sets structured_outputs (vLLM v0.12 and later, StructuredOutputsParams
// in vllm/sampling_params.py): the schema as "json", or, with a prefix, suffix or
// repetition, an XGrammar structural tag as "structural_tag" (taken by vLLM's
// xgrammar backend, the default).
func Constrain(b *openaihttp.CompletionRequest, c *engine.Constraint) {
	if openaihttp.Plain(c) {
		b.StructuredOutputs = &openaihttp.StructuredOutputs{JSON: openaihttp.SchemaJSON(c)}
		return
	}
	b.StructuredOutputs = &openaihttp.StructuredOutputs{StructuralTag: string(openaihttp.StructuralTag(c))}
}

// Nixl is the NixlConnector's two legs. The engines run with
// --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'.
type Nixl struct{}

// PrefillParams are the prefill leg's kv_transfer_params: "decode remotely", the
// remote fields null (toy_proxy_server.py, send_request_to_service).
type PrefillParams struct {
	DoRemoteDecode  bool    `json:"do_remote_decode"`
	DoRemotePrefill bool    `json:"do_remote_prefill"`
	RemoteEngineID  *string `json:"remote_engine_id"`
	RemoteBlockIDs  *[]int  `json:"remote_block_ids"`
	RemoteHost      *string `json:"remote_host"`
	RemotePort      *int    `json:"remote_port"`
}

// Prefill posts the prompt for one token, not streamed, asking the engine to
// keep its KV for a remote decode; the answer's top-level kv_transfer_params
// (remote_engine_id, remote_block_ids, remote_host, remote_port,
// remote_request_id, tp_size, ...) are the decode leg's. vLLM returns them only
// when the leg finished by length; without them there is nothing to pull.
func (Nixl) Prefill(ctx context.Context, e *openaihttp.Engine, req engine.Request, body openaihttp.CompletionRequest) (engine.RefExport, error) {
	p, err := json.Marshal(PrefillParams{DoRemoteDecode: true})
	if err != nil {
		return nil, err
	}
	body.KVTransferParams, body.MaxTokens, body.Stream, body.StreamOptions = p, 1, false, nil
	start := time.Now()
	resp, err := e.Complete(ctx, req.ID, body)
	if err != nil {
		return nil, err
	}
	if !openaihttp.Present(resp.KVTransferParams) {
		return nil, engine.ErrNoTransferParams
	}
	return &openaihttp.Done{P: resp.KVTransferParams, Took: time.Since(start)}, nil
}

// Decode passes the prefill leg's parameters verbatim, with do_remote_prefill
// true and do_remote_decode false (as llm-d's sidecar forces them; vLLM already
// answers so).
func (Nixl) Decode(body *openaihttp.CompletionRequest, params []byte) error {
	p, err := openaihttp.SetField(params, "do_remote_prefill", true)
	if err == nil {
		p, err = openaihttp.SetField(p, "do_remote_decode", false)
	}
	if err != nil {
		return err
	}
	body.KVTransferParams = p
	return nil
}
