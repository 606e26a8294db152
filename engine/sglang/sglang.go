// Package sglang is SGLang's dialect of the OpenAI API (engine/openaihttp), and
// its prefill/decode disaggregation's bootstrap.
//
// Protocol followed: SGLang main of 2026-11 (v0.5 and later):
//   - python/sglang/srt/entrypoints/openai/protocol.py: CompletionRequest's
//     return_token_ids, bootstrap_host, bootstrap_port, bootstrap_room;
//   - sgl-model-gateway/src/routers/http/pd_router.rs: the router adds the
//     prefill server's bootstrap host and port and a random room to the body and
//     sends the same body to the prefill and the decode server at once (the
//     prefill leg not streamed); the client reads the decode server's answer;
//   - python/sglang/srt/metrics/collector.py: sglang:num_running_reqs,
//     sglang:num_queue_reqs, sglang:token_usage (--enable-metrics).
package sglang

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/openaihttp"
)

// Dialect is SGLang's. bootstrap is the prefill server's bootstrap server as
// decode servers reach it (--disaggregation-bootstrap-port, 8998 by default);
// only a prefill worker's matters.
func Dialect(bootstrap Bootstrap) openaihttp.Dialect {
	return openaihttp.Dialect{
		Name: "sglang", MetricsPath: "/metrics", HealthPath: "/health",
		Load: openaihttp.LoadMetrics{
			Running: []string{"sglang:num_running_reqs"}, Waiting: []string{"sglang:num_queue_reqs"},
			KVUsage: []string{"sglang:token_usage"},
		},
		AskTokenIDs: func(b *openaihttp.CompletionRequest) {
			yes := true
			b.ReturnTokenIDs = &yes
		},
		Disagg:    bootstrap,
		Constrain: Constrain,
	}
}

// Constrain sets SGLang's completions fields (protocol.py's CompletionRequest,
// SGLang v0.5 and later): the schema as the json_schema string, or, with a prefix,
// suffix or repetition, an XGrammar structural tag as response_format (its
// StructuralTagResponseFormat; the xgrammar grammar backend, the default).
func Constrain(b *openaihttp.CompletionRequest, c *engine.Constraint) {
	if openaihttp.Plain(c) {
		b.JSONSchema = string(openaihttp.SchemaJSON(c))
		return
	}
	b.ResponseFormat = &openaihttp.ResponseFormat{Type: "structural_tag", Format: openaihttp.StructuralTagFormat(c)}
}

// DefaultBootstrapPort is SGLang's --disaggregation-bootstrap-port default.
const DefaultBootstrapPort = 8998

// Bootstrap is the prefill server's bootstrap server.
type Bootstrap struct {
	Host string
	Port int
}

// Params are the bootstrap fields both legs carry.
type Params struct {
	Host string `json:"bootstrap_host"`
	Port int    `json:"bootstrap_port"`
	Room uint64 `json:"bootstrap_room"`
}

// Prefill starts the prefill leg with this server's bootstrap and a random room
// and returns at once: the decode leg must start while the prefill leg runs,
// since the prefill server pushes the KV into pages the decode server
// allocates. The export's Wait is the prefill leg's answer.
func (b Bootstrap) Prefill(ctx context.Context, e *openaihttp.Engine, req engine.Request, body openaihttp.CompletionRequest) (engine.RefExport, error) {
	if b.Host == "" || b.Port <= 0 {
		return nil, fmt.Errorf("%w: this sglang prefill worker has no bootstrap host and port configured", engine.ErrNoTransferParams)
	}
	p := Params{Host: b.Host, Port: b.Port, Room: rand.Uint64() >> 1} // a non-negative int64, as the gateway draws it
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	set(&body, p)
	body.Stream, body.StreamOptions = false, nil
	return openaihttp.Go(ctx, raw, func(ctx context.Context) error {
		_, err := e.Complete(ctx, req.ID, body)
		return err
	}), nil
}

// Decode puts the prefill worker's bootstrap host, port and room in the body.
func (Bootstrap) Decode(body *openaihttp.CompletionRequest, params []byte) error {
	var p Params
	d := json.NewDecoder(bytes.NewReader(params))
	d.DisallowUnknownFields()
	if err := d.Decode(&p); err != nil {
		return fmt.Errorf("bootstrap parameters: %w", err)
	}
	if p.Host == "" || p.Port <= 0 {
		return errors.New("bootstrap parameters without a host and port")
	}
	set(body, p)
	return nil
}

func set(body *openaihttp.CompletionRequest, p Params) {
	room := p.Room
	body.BootstrapHost, body.BootstrapPort, body.BootstrapRoom = p.Host, p.Port, &room
}
