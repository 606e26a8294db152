package enginereplay

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/openaihttp"
)

// Leg is which call of the engine adapter a completion came from.
type Leg string

const (
	Generate Leg = "generate" // Engine.Generate: the local path
	Prefill  Leg = "prefill"  // ExportRef: the prefill leg of the engine's disaggregation
	Decode   Leg = "decode"   // ImportRef: the decode leg, with the prefill leg's parameters
)

// Call is one completion in a capture, as the engine request a worker made it
// from: a test replays a capture by making the same calls.
type Call struct {
	Leg Leg
	Req engine.Request
	// Params are a decode leg's transfer parameters as its body carried them:
	// a capture of a decode worker holds no prefill leg to take them from.
	Params json.RawMessage
	// Exchange is the recorded one.
	Exchange *openaihttp.HTTPExchange
}

// Calls are a capture's completions in the order they were sent, the worker's
// start-up probes (request ids tandem-probe-*) left out.
func Calls(xs []openaihttp.Exchange) ([]Call, error) {
	xs = slices.Clone(xs)
	slices.SortStableFunc(xs, func(a, b openaihttp.Exchange) int { return cmp.Compare(a.Seq, b.Seq) })
	var out []Call
	for _, x := range xs {
		h := x.HTTP
		if h == nil || h.Method != "POST" || h.Path != "/v1/completions" || strings.HasPrefix(h.Header["X-Request-Id"], "tandem-probe") {
			continue
		}
		var b openaihttp.CompletionRequest
		var legs struct {
			KV *struct {
				DoRemoteDecode  bool `json:"do_remote_decode"`
				DoRemotePrefill bool `json:"do_remote_prefill"`
			} `json:"kv_transfer_params"`
			Disagg *struct {
				RequestType string `json:"request_type"`
			} `json:"disaggregated_params"`
		}
		if err := json.Unmarshal(h.Body, &b); err != nil {
			return nil, fmt.Errorf("seq %d: %w", x.Seq, err)
		}
		if err := json.Unmarshal(h.Body, &legs); err != nil {
			return nil, fmt.Errorf("seq %d: %w", x.Seq, err)
		}
		c := Call{Leg: Generate, Exchange: h, Req: engine.Request{
			ID: h.Header["X-Request-Id"], Prompt: b.Prompt, MaxTokens: b.MaxTokens, StopTokens: b.StopTokenIDs,
			Sampling: engine.Sampling{Temperature: b.Temperature},
		}}
		if b.TopP != nil {
			c.Req.Sampling.TopP = *b.TopP
		}
		if b.TopK != nil {
			c.Req.Sampling.TopK = *b.TopK
		}
		if b.Seed != nil {
			c.Req.Sampling.Seed = uint64(*b.Seed)
		}
		switch {
		case legs.KV != nil && legs.KV.DoRemoteDecode, legs.Disagg != nil && legs.Disagg.RequestType == "context_only", b.BootstrapRoom != nil && !b.Stream:
			c.Leg = Prefill
		case legs.KV != nil && legs.KV.DoRemotePrefill:
			c.Leg, c.Params = Decode, b.KVTransferParams
		case legs.Disagg != nil && legs.Disagg.RequestType == "generation_only":
			c.Leg, c.Params = Decode, b.DisaggregatedParams
		case b.BootstrapRoom != nil:
			c.Leg = Decode
			c.Params, _ = json.Marshal(map[string]any{"bootstrap_host": b.BootstrapHost, "bootstrap_port": b.BootstrapPort,
				"bootstrap_room": *b.BootstrapRoom})
		}
		out = append(out, c)
	}
	return out, nil
}

// Said is what a recorded completion answered: its text and token ids, all
// chunks together, and its finish reason.
type Said struct {
	Text     string
	TokenIDs []uint32
	Finish   string
	// Params: the answer carried transfer parameters (a prefill leg's).
	Params bool
}

// Answer reads a recorded completion's answer, streamed or not.
func Answer(h *openaihttp.HTTPExchange) (Said, error) {
	var datas [][]byte
	if len(h.Chunks) > 0 {
		var all strings.Builder
		for _, c := range h.Chunks {
			all.WriteString(c.Data)
		}
		for _, line := range strings.Split(all.String(), "\n") {
			v, ok := strings.CutPrefix(line, "data:")
			if v = strings.TrimSpace(v); ok && v != "[DONE]" && v != "" {
				datas = append(datas, []byte(v))
			}
		}
	} else {
		datas = append(datas, h.ResponseBody)
	}
	var s Said
	for _, d := range datas {
		r, err := openaihttp.ParseCompletion(d)
		if err != nil {
			return Said{}, err
		}
		s.Params = s.Params || openaihttp.Present(r.KVTransferParams)
		for _, c := range r.Choices {
			s.Params = s.Params || openaihttp.Present(c.DisaggregatedParams)
			s.Text += c.Text
			s.TokenIDs = append(s.TokenIDs, c.TokenIDs...)
			if c.FinishReason != nil && *c.FinishReason != "" {
				s.Finish = *c.FinishReason
			}
		}
	}
	return s, nil
}
