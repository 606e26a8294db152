package fakeengine

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// VLLMParams are the kv_transfer_params a vLLM prefill leg answers with
// (NixlConnector.request_finished: the engine id, the blocks to read, where its
// NIXL side channel listens, the request id the blocks are held under, the
// tensor-parallel size).
type VLLMParams struct {
	DoRemotePrefill bool      `json:"do_remote_prefill"`
	DoRemoteDecode  bool      `json:"do_remote_decode"`
	RemoteBlockIDs  [][]int64 `json:"remote_block_ids"`
	RemoteEngineID  string    `json:"remote_engine_id"`
	RemoteRequestID string    `json:"remote_request_id"`
	RemoteHost      string    `json:"remote_host"`
	RemotePort      int       `json:"remote_port"`
	TPSize          int       `json:"tp_size"`
}

// TRTParams are the disaggregated_params a TensorRT-LLM context leg answers
// with (openai_protocol.DisaggregatedParams).
type TRTParams struct {
	RequestType        string   `json:"request_type"`
	FirstGenTokens     []uint32 `json:"first_gen_tokens"`
	CtxRequestID       int64    `json:"ctx_request_id"`
	EncodedOpaqueState string   `json:"encoded_opaque_state"`
	DraftTokens        []uint32 `json:"draft_tokens"`
	DisaggRequestID    int64    `json:"disagg_request_id"`
}

// prefillLeg answers a disaggregation prefill leg, reporting whether b was one.
func (s *Server) prefillLeg(w http.ResponseWriter, r *http.Request, b body, prompt []uint32) bool {
	isLeg := false
	switch s.Kind {
	case VLLM:
		isLeg = b.KVTransferParams != nil && b.KVTransferParams.DoRemoteDecode
	case TRTLLM:
		isLeg = b.DisaggregatedParams != nil && b.DisaggregatedParams.RequestType == "context_only"
	case SGLang:
		isLeg = b.BootstrapRoom != nil && !b.Stream
	}
	if !isLeg {
		return false
	}
	s.mu.Lock()
	fault := s.fault
	s.mu.Unlock()
	switch fault {
	case Prefill503:
		writeError(w, http.StatusServiceUnavailable, "the prefill engine is overloaded")
		return true
	case PrefillHang:
		<-r.Context().Done()
		s.cancel(r)
		return true
	}
	if b.Stream || (s.Kind != SGLang && (b.MaxTokens == nil || *b.MaxTokens != 1)) {
		writeError(w, http.StatusBadRequest, "a prefill leg is one token, not streamed")
		return true
	}
	first := s.Output[0]
	c := s.choice(b, []uint32{first})
	finish := "length"
	c.FinishReason = &finish
	resp := response{ID: "cmpl-fake-prefill", Object: "text_completion", Model: s.Model, Choices: []choice{c},
		Usage: &usage{PromptTokens: len(prompt), CompletionTokens: 1, TotalTokens: len(prompt) + 1}}
	if fault != PrefillNoParams {
		switch s.Kind {
		case VLLM:
			resp.KVTransferParams, _ = json.Marshal(VLLMParams{
				DoRemotePrefill: true, RemoteBlockIDs: [][]int64{{7, 8, 9}}, RemoteEngineID: "fake-prefill-engine",
				RemoteRequestID: r.Header.Get("X-Request-Id"), RemoteHost: "10.0.0.7", RemotePort: 5600, TPSize: 1,
			})
		case TRTLLM:
			resp.Choices[0].DisaggregatedParams, _ = json.Marshal(TRTParams{
				RequestType: "context_only", FirstGenTokens: []uint32{first}, CtxRequestID: 4242,
				EncodedOpaqueState: "b3BhcXVlLXN0YXRl", DisaggRequestID: 99,
			})
			resp.PromptTokenIDs = prompt
		}
	}
	writeJSON(w, resp)
	return true
}

// String names the server, for test logs.
func (s *Server) String() string { return fmt.Sprintf("fake %s at %s", s.Kind, s.URL()) }
