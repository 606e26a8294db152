package openaihttp

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/tandem-serve/tandem/engine"
)

// generateWhole runs a request for the prompt's logprobs. vLLM reports them
// (prompt_logprobs) only in a non-streamed answer, so the answer is asked for
// whole, within the first-token bound, and replayed as a stream of one event.
func (e *Engine) generateWhole(ctx context.Context, req engine.Request) (engine.Stream, error) {
	if !e.d.PromptLogprobs {
		return nil, fmt.Errorf("%w: tandem asks %s for no prompt logprobs; serve with --engine native or vllm", engine.ErrNoPromptLogprobs, e.d.Name)
	}
	body := e.Body(req, false)
	n := min(req.TopLogprobs, engine.MaxTopLogprobs)
	body.PromptLogprobs = &n
	rctx, cancel := context.WithCancelCause(ctx)
	dog := newWatchdog(cancel, e.where(), e.timeouts)
	dog.arm("answer", boundFirstToken)
	raw, err := e.c.postWhole(rctx, req.ID, &body)
	if err != nil {
		dog.stop()
		stall := stallOf(rctx)
		cancel(nil)
		if stall != nil {
			return nil, e.count(stall)
		}
		return nil, e.count(e.wrap(ctx, err))
	}
	resp, err := ParseCompletion(raw)
	var lps []engine.TokenLogprobs
	if err == nil {
		lps, err = promptLogprobsOf(resp, req.Prompt, n)
	}
	var event bytes.Buffer
	if err == nil {
		event.WriteString("data: ")
		err = json.Compact(&event, raw)
		event.WriteString("\n\ndata: [DONE]\n\n")
	}
	if err != nil {
		dog.stop()
		cancel(nil)
		return nil, e.count(fmt.Errorf("%s: %w", e.where(), err))
	}
	s := newStream(e, req, rctx, cancel, dog, io.NopCloser(&event))
	s.promptLPs = lps
	return s, nil
}

// promptLogprobsOf reads vLLM's prompt_logprobs of the only choice: null for the
// first token, then a map from token id to logprob and rank holding the prompt's
// token and the top alternatives (rank 1 the likeliest).
func promptLogprobsOf(resp *CompletionResponse, prompt []uint32, top int) ([]engine.TokenLogprobs, error) {
	if len(resp.Choices) == 0 {
		return nil, &ProtocolError{Msg: "an answer with no choices"}
	}
	pl := resp.Choices[0].PromptLogprobs
	if len(prompt) == 0 || len(pl) != len(prompt) {
		return nil, &ProtocolError{Msg: fmt.Sprintf("%d prompt_logprobs for a prompt of %d tokens (is prompt_logprobs honoured?)", len(pl), len(prompt))}
	}
	out := make([]engine.TokenLogprobs, len(prompt)-1)
	for i, m := range pl[1:] {
		own, ok := m[strconv.FormatUint(uint64(prompt[i+1]), 10)]
		if !ok || own == nil {
			return nil, &ProtocolError{Msg: fmt.Sprintf("prompt_logprobs[%d] lacks the prompt's token %d", i+1, prompt[i+1])}
		}
		out[i].Logprob = float32(own.Logprob)
		for k, v := range m {
			id, err := strconv.ParseUint(k, 10, 32)
			if err != nil || v == nil {
				return nil, &ProtocolError{Msg: fmt.Sprintf("prompt_logprobs[%d]: key %q is not a token id", i+1, k)}
			}
			if v.Rank >= 1 && v.Rank <= top {
				out[i].Top = append(out[i].Top, engine.Logprob{Token: uint32(id), Logprob: float32(v.Logprob)})
			}
		}
		slices.SortFunc(out[i].Top, func(a, b engine.Logprob) int {
			return cmp.Or(cmp.Compare(b.Logprob, a.Logprob), cmp.Compare(a.Token, b.Token))
		})
	}
	return out, nil
}

// PromptLogprobs implements engine.PromptLogprobsStream: nil unless asked.
func (s *stream) PromptLogprobs() []engine.TokenLogprobs { return s.promptLPs }
