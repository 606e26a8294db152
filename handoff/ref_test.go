package handoff

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/engine"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
)

// refExport is a prefill engine's side of a handoff by reference.
type refExport struct {
	params []byte
	wait   func(ctx context.Context) error
}

func (x *refExport) Params() []byte { return x.params }
func (x *refExport) Wait(ctx context.Context) error {
	if x.wait == nil {
		return nil
	}
	return x.wait(ctx)
}
func (x *refExport) QueueTime() time.Duration   { return time.Millisecond }
func (x *refExport) PrefillTime() time.Duration { return 7 * time.Millisecond }
func (x *refExport) Release()                   {}

// refPipe is a prefill worker in process sending exp by reference.
type refPipe struct {
	exp    *refExport
	layout engine.Layout
	asked  *prefillv1.PrefillRequest
}

func (p *refPipe) Prefill(ctx context.Context, req *prefillv1.PrefillRequest) (Stream, error) {
	p.asked = req
	msgs := make(chan *prefillv1.PrefillResponse, 4)
	s := &refStream{ctx: ctx, msgs: msgs}
	go func() {
		s.err = SendRef(ctx, p.exp, Meta{RequestID: req.GetRequestId(), Layout: p.layout}, func(r *prefillv1.PrefillResponse) error {
			select {
			case msgs <- r:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		close(msgs)
	}()
	return s, nil
}

type refStream struct {
	ctx  context.Context
	msgs chan *prefillv1.PrefillResponse
	err  error
}

func (s *refStream) Recv() (*prefillv1.PrefillResponse, error) {
	select {
	case m, ok := <-s.msgs:
		if !ok {
			if s.err != nil {
				return nil, s.err
			}
			return nil, io.EOF
		}
		return m, nil
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}

// refEngine is a decode engine that takes KV by reference.
type refEngine struct {
	layout engine.Layout
	got    []byte
	closed atomic.Bool
	refuse error // ImportRef's answer, if set
}

func (e *refEngine) Info() engine.Info { return engine.Info{Layout: e.layout, VocabSize: 100} }
func (e *refEngine) Import(context.Context, engine.Request, engine.ImportSpec) (engine.Importer, error) {
	return nil, errors.New("by reference only")
}
func (e *refEngine) ImportRef(_ context.Context, _ engine.Request, params []byte) (engine.Stream, error) {
	if e.refuse != nil {
		return nil, e.refuse
	}
	e.got = params
	return &refDecode{e: e}, nil
}

type refDecode struct{ e *refEngine }

func (d *refDecode) Next(context.Context) (uint32, error) { return 0, io.EOF }
func (d *refDecode) Logprobs() *engine.TokenLogprobs      { return nil }
func (d *refDecode) Finish() engine.FinishReason          { return engine.FinishStop }
func (d *refDecode) Usage() engine.Usage                  { return engine.Usage{} }
func (d *refDecode) Close()                               { d.e.closed.Store(true) }

func TestHandoffByReference(t *testing.T) {
	layout := engine.Layout{BlockSize: 16, Fingerprint: "vllm/m"}
	req := engine.Request{ID: "r1", Prompt: make([]uint32, 40)}
	params := []byte(`{"remote_engine_id":"e","remote_block_ids":[[1,2]]}`)
	boom := errors.New("prefill engine: HTTP 500")
	for _, c := range []struct {
		name      string
		exp       *refExport
		sent      engine.Layout
		deadline  time.Duration
		refuse    error // the decode engine's answer to ImportRef
		reason    string
		streamEnd bool // the decode leg was started, then abandoned
	}{
		{name: "ok", exp: &refExport{params: params}},
		{name: "no params", exp: &refExport{}, reason: ReasonBeforeKV},
		{name: "other model", exp: &refExport{params: params}, sent: engine.Layout{BlockSize: 16, Fingerprint: "vllm/other"}, reason: ReasonLayout},
		{name: "prefill fails after the header", exp: &refExport{params: params, wait: func(context.Context) error { return boom }},
			reason: ReasonBeforeKV, streamEnd: true},
		{name: "prefill hangs", exp: &refExport{params: params, wait: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
			deadline: 50 * time.Millisecond, reason: ReasonTimeout, streamEnd: true},
		// Named as the sim and native engines' import is, so the decode worker
		// refuses the request instead of prefilling on the same full pool.
		{name: "decode pool full", exp: &refExport{params: params}, refuse: fmt.Errorf("vllm: %w", engine.ErrNoBlocks), reason: ReasonImportNoBlocks},
	} {
		t.Run(c.name, func(t *testing.T) {
			sent := layout
			if c.sent != (engine.Layout{}) {
				sent = c.sent
			}
			p := &refPipe{exp: c.exp, layout: sent}
			eng := &refEngine{layout: layout, refuse: c.refuse}
			f := Fetch{Worker: "prefill-1", Deadline: c.deadline}
			if f.Deadline == 0 {
				f.Deadline = 5 * time.Second
			}
			out, res, err := f.Run(t.Context(), p, eng, req)
			if !p.asked.GetByReference() {
				t.Error("the request did not ask for a handoff by reference")
			}
			if c.reason == "" {
				if err != nil || string(eng.got) != string(params) || res.Prefill != 7*time.Millisecond || out == nil {
					t.Fatalf("err %v params %s result %+v", err, eng.got, res)
				}
				return
			}
			var he *Error
			// A timeout spent the deadline: no second prefill worker, local at once.
			// A full decode pool: no other prefill worker either.
			beforeKV := c.reason != ReasonTimeout && c.reason != ReasonImportNoBlocks
			if !errors.As(err, &he) || he.Reason != c.reason || he.BeforeKV != beforeKV {
				t.Fatalf("err %v (before KV %v), want reason %s", err, he != nil && he.BeforeKV, c.reason)
			}
			if eng.closed.Load() != c.streamEnd {
				t.Errorf("decode leg closed %v, want %v", eng.closed.Load(), c.streamEnd)
			}
		})
	}
}
