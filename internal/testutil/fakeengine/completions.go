package fakeengine

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// body is the fields of a completions request the fake acts on.
type body struct {
	Model                  string          `json:"model"`
	Prompt                 json.RawMessage `json:"prompt"`
	MaxTokens              *int            `json:"max_tokens"`
	Stream                 bool            `json:"stream"`
	StopTokenIDs           []uint32        `json:"stop_token_ids"`
	Logprobs               *int            `json:"logprobs"`
	PromptLogprobs         *int            `json:"prompt_logprobs"`
	ReturnTokenIDs         bool            `json:"return_token_ids"`
	ReturnTokensAsTokenIDs bool            `json:"return_tokens_as_token_ids"`
	Detokenize             *bool           `json:"detokenize"`
	KVTransferParams       *struct {
		DoRemoteDecode  bool `json:"do_remote_decode"`
		DoRemotePrefill bool `json:"do_remote_prefill"`
	} `json:"kv_transfer_params"`
	DisaggregatedParams *struct {
		RequestType string `json:"request_type"`
	} `json:"disaggregated_params"`
	BootstrapHost string  `json:"bootstrap_host"`
	BootstrapPort int     `json:"bootstrap_port"`
	BootstrapRoom *uint64 `json:"bootstrap_room"`
}

type logprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

type choice struct {
	Index               int             `json:"index"`
	Text                string          `json:"text"`
	TokenIDs            []uint32        `json:"token_ids,omitempty"`
	Logprobs            *logprobs       `json:"logprobs"`
	FinishReason        *string         `json:"finish_reason"`
	DisaggregatedParams json.RawMessage `json:"disaggregated_params,omitempty"`
	// PromptLogprobs is vLLM's: null, then per prompt token a map from token id to
	// its logprob, rank and text.
	PromptLogprobs []map[string]promptLogprob `json:"prompt_logprobs,omitempty"`
}

type promptLogprob struct {
	Logprob      float64 `json:"logprob"`
	Rank         int     `json:"rank"`
	DecodedToken string  `json:"decoded_token"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type response struct {
	ID               string          `json:"id"`
	Object           string          `json:"object"`
	Model            string          `json:"model"`
	Choices          []choice        `json:"choices"`
	Usage            *usage          `json:"usage"`
	KVTransferParams json.RawMessage `json:"kv_transfer_params,omitempty"`
	PromptTokenIDs   []uint32        `json:"prompt_token_ids,omitempty"`
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.record(r, raw)
	var b body
	if err := json.Unmarshal(raw, &b); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	var prompt []uint32
	if err := json.Unmarshal(b.Prompt, &prompt); err != nil || len(prompt) == 0 {
		writeError(w, http.StatusBadRequest, "prompt: want a non-empty list of token ids")
		return
	}
	if b.Model != s.Model {
		writeError(w, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", b.Model))
		return
	}
	if b.PromptLogprobs != nil && (s.Kind != VLLM || b.Stream) {
		// vLLM refuses them streamed; the others do not know the field.
		writeError(w, http.StatusBadRequest, "`prompt_logprobs` are not available when `stream=True`.")
		return
	}
	if s.prefillLeg(w, r, b, prompt) || s.faultBefore(w, r) {
		return
	}
	n := 16
	if b.MaxTokens != nil {
		n = *b.MaxTokens
	}
	out := s.generate(n, b.StopTokenIDs)
	if !b.Stream {
		finish := "length"
		if len(out) < n {
			finish = "stop"
		}
		c := s.choice(b, out)
		c.FinishReason = &finish
		if b.PromptLogprobs != nil {
			c.PromptLogprobs = s.promptLogprobs(prompt, *b.PromptLogprobs)
		}
		writeJSON(w, response{ID: "cmpl-fake", Object: "text_completion", Model: s.Model, Choices: []choice{c},
			Usage: &usage{PromptTokens: len(prompt), CompletionTokens: len(out), TotalTokens: len(prompt) + len(out)}})
		return
	}
	s.stream(w, r, b, prompt, out, n)
}

// PromptLogprob is what the fake reports for prompt token i (i >= 1) of a
// prompt: its own logprob, -i/10 at rank 2, under one likelier token (id+1, at
// -i/10+0.5) and, further down, ids id+2, id+3, ... at -i/10-1, -i/10-2, ...
func PromptLogprob(i int) float64 { return -float64(i) / 10 }

// promptLogprobs lays out vLLM's prompt_logprobs for prompt with top
// alternatives each: the top ranks, and the prompt's token whatever its rank.
func (s *Server) promptLogprobs(prompt []uint32, top int) []map[string]promptLogprob {
	out := []map[string]promptLogprob{nil}
	for i := 1; i < len(prompt); i++ {
		own := PromptLogprob(i)
		id := prompt[i]
		m := map[string]promptLogprob{strconv.Itoa(int(id)): {Logprob: own, Rank: 2, DecodedToken: s.Text(id)}}
		for rank := 1; rank <= top; rank++ {
			alt, lp := id+1, own+0.5
			if rank > 2 {
				alt, lp = id+uint32(rank), own-float64(rank-2)
			}
			if rank != 2 {
				m[strconv.Itoa(int(alt))] = promptLogprob{Logprob: lp, Rank: rank, DecodedToken: s.Text(alt)}
			}
		}
		out = append(out, m)
	}
	return out
}

// generate is the model's output for n tokens: Output, cycled, ending early at
// a stop token (included, as vLLM includes the EOS it stopped at in token_ids).
func (s *Server) generate(n int, stop []uint32) []uint32 {
	var out []uint32
	for i := 0; i < n; i++ {
		t := s.Output[i%len(s.Output)]
		out = append(out, t)
		for _, st := range stop {
			if t == st {
				return out
			}
		}
	}
	return out
}

// choice is toks as the request asked to see them.
func (s *Server) choice(b body, toks []uint32) choice {
	c := choice{}
	stopText := map[uint32]bool{}
	for _, t := range b.StopTokenIDs {
		stopText[t] = true
	}
	detok := b.Detokenize == nil || *b.Detokenize
	for _, t := range toks {
		if detok && !stopText[t] { // a stop token's text is not in the output
			c.Text += s.Text(t)
		}
	}
	switch {
	case s.Kind == TRTLLM && s.TokenIDs && !detok:
		c.Text, c.TokenIDs = "", toks
	case s.Kind != TRTLLM && s.TokenIDs && b.ReturnTokenIDs:
		c.TokenIDs = toks
	}
	if b.Logprobs != nil {
		lp := &logprobs{}
		for i, t := range toks {
			name := s.Text(t)
			if s.LogprobIDs && b.ReturnTokensAsTokenIDs {
				name = "token_id:" + strconv.Itoa(int(t))
			}
			lp.Tokens = append(lp.Tokens, name)
			lp.TokenLogprobs = append(lp.TokenLogprobs, -0.5-float64(i%3))
			lp.TextOffset = append(lp.TextOffset, i)
			top := map[string]float64{name: -0.5 - float64(i%3)}
			if *b.Logprobs > 1 {
				alt := "token_id:" + strconv.Itoa(int(t)+1)
				if !(s.LogprobIDs && b.ReturnTokensAsTokenIDs) {
					alt = s.Text(t + 1)
				}
				top[alt] = -3
			}
			lp.TopLogprobs = append(lp.TopLogprobs, top)
		}
		c.Logprobs = lp
	}
	return c
}

// stream sends out token by token as server-sent events, then the usage chunk
// and [DONE]; a client that goes away is reported on Cancelled.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, b body, prompt, out []uint32, n int) {
	w.Header().Set("Content-Type", "text/event-stream")
	fl, _ := w.(http.Flusher)
	send := func(v any) bool {
		j, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", j); err != nil {
			return false
		}
		if fl != nil {
			fl.Flush()
		}
		return true
	}
	for i, t := range out {
		if s.faultAt(w, r, i) {
			return
		}
		delay := s.TokenDelay
		if i == 0 && s.FirstTokenDelay > 0 {
			delay = s.FirstTokenDelay
		}
		select {
		case <-r.Context().Done():
			s.cancel(r)
			return
		case <-time.After(delay):
		}
		c := s.choice(b, []uint32{t})
		if i == len(out)-1 {
			finish := "length"
			if len(out) < n {
				finish = "stop"
			}
			c.FinishReason = &finish
		}
		if !send(response{ID: "cmpl-fake", Object: "text_completion", Model: s.Model, Choices: []choice{c}}) {
			s.cancel(r)
			return
		}
	}
	send(response{ID: "cmpl-fake", Object: "text_completion", Model: s.Model, Choices: []choice{},
		Usage: &usage{PromptTokens: len(prompt), CompletionTokens: len(out), TotalTokens: len(prompt) + len(out)}})
	_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
}
