package openaihttp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/tandem-serve/tandem/engine"
)

// Disagg is an engine's own disaggregation as its HTTP API drives it: what the
// prefill leg sends and returns, and how its parameters enter the decode leg.
type Disagg interface {
	// Prefill runs the prefill leg of req (body is req, not streamed) and returns
	// the parameters for the decode leg.
	Prefill(ctx context.Context, e *Engine, req engine.Request, body CompletionRequest) (engine.RefExport, error)
	// Decode adds the prefill leg's parameters to the decode leg's body.
	Decode(body *CompletionRequest, params []byte) error
}

// ExportRef runs the prefill leg of the engine's own disaggregation.
func (e *Engine) ExportRef(ctx context.Context, req engine.Request) (engine.RefExport, error) {
	if e.d.Disagg == nil {
		return nil, fmt.Errorf("%w: tandem drives no disaggregation of %s", engine.ErrNoExport, e.d.Name)
	}
	return e.d.Disagg.Prefill(ctx, e, req, e.Body(req, false))
}

// ImportRef starts the decode leg with the prefill leg's parameters.
func (e *Engine) ImportRef(ctx context.Context, req engine.Request, params []byte) (engine.Stream, error) {
	if e.d.Disagg == nil {
		return nil, fmt.Errorf("%w: tandem drives no disaggregation of %s", engine.ErrNoExport, e.d.Name)
	}
	body := e.Body(req, true)
	if err := e.d.Disagg.Decode(&body, params); err != nil {
		return nil, fmt.Errorf("%w: %s transfer parameters: %v", engine.ErrRejected, e.d.Name, err)
	}
	return e.Start(ctx, req, body)
}

// Done is a RefExport whose prefill leg is over when it is made: the engine
// answered with the parameters.
type Done struct {
	P           []byte
	Queue, Took time.Duration
}

func (d *Done) Params() []byte             { return d.P }
func (d *Done) Wait(context.Context) error { return nil }
func (d *Done) QueueTime() time.Duration   { return d.Queue }
func (d *Done) PrefillTime() time.Duration { return d.Took }
func (d *Done) Release()                   {}

// Running is a RefExport whose prefill leg runs on after its parameters are
// known (SGLang's: both legs at once); Wait waits for the leg's answer.
type Running struct {
	P      []byte
	start  time.Time
	done   chan struct{}
	err    error
	took   time.Duration
	cancel context.CancelFunc
	once   sync.Once
}

// Go runs leg in the background under a context that Release cancels.
func Go(ctx context.Context, params []byte, leg func(ctx context.Context) error) *Running {
	lctx, cancel := context.WithCancel(ctx)
	r := &Running{P: params, start: time.Now(), done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(r.done)
		r.err = leg(lctx)
		r.took = time.Since(r.start)
	}()
	return r
}

func (r *Running) Params() []byte { return r.P }

// Wait returns the leg's error once it is over, or ctx's.
func (r *Running) Wait(ctx context.Context) error {
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Running) QueueTime() time.Duration { return 0 }

// PrefillTime is the leg's duration, once it is over.
func (r *Running) PrefillTime() time.Duration {
	select {
	case <-r.done:
		return r.took
	default:
		return time.Since(r.start)
	}
}

// Release cancels the leg if it still runs.
func (r *Running) Release() { r.once.Do(r.cancel) }

// SetField returns the JSON object obj with key set to value, the other keys
// kept as they were: transfer parameters pass through verbatim, with only what
// a leg must change changed.
func SetField(obj json.RawMessage, key string, value any) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if m == nil {
		return nil, fmt.Errorf("not a JSON object: %s", bytes.TrimSpace(obj))
	}
	v, err := json.Marshal(value)
	if err != nil {
		return nil, err
	}
	m[key] = v
	return json.Marshal(m)
}

// Present reports whether raw holds a JSON value other than null.
func Present(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && !bytes.Equal(t, []byte("null"))
}
