package decode_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/native"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
)

// patientPool is a native decode engine whose pool another import fills, and
// whose imports wait for blocks far longer than any deadline here: the
// handoff's deadline or the client's context ends the wait first, in the
// native engine's own wait. Once the import has failed, the filler lets go,
// so that a local prefill can run.
type patientPool struct {
	*native.Engine
	filler engine.Importer
	free   func()
}

func newPatientPool(t *testing.T) *patientPool {
	t.Helper()
	e, err := native.New(native.Config{Model: "tiny", Seed: 7, NumBlocks: 16, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	layout := e.Info().Layout
	filler, err := e.Import(context.Background(), engine.Request{ID: "filler", Prompt: prompt(99, 16*layout.BlockSize-1)},
		engine.ImportSpec{NumBlocks: 16, Layout: layout})
	if err != nil {
		t.Fatal(err)
	}
	p := &patientPool{Engine: e, filler: filler}
	p.free = sync.OnceFunc(filler.Abort)
	t.Cleanup(p.free)
	return p
}

func (p *patientPool) Import(ctx context.Context, req engine.Request, spec engine.ImportSpec) (engine.Importer, error) {
	spec.BlockWait = time.Hour
	im, err := p.Engine.Import(ctx, req, spec)
	p.free()
	return im, err
}

// An import whose wait for blocks the handoff's deadline cuts short is a
// remote timeout, and falls back to local prefill; one the client's going
// away cuts short ends the request as the client's. Neither is a refusal for
// lack of KV blocks (kv_blocks), which is for a wait that ran its course.
func TestImportWaitCutShort(t *testing.T) {
	for _, tc := range []struct {
		name           string
		remoteDeadline time.Duration
		clientTimeout  time.Duration
	}{
		{"handoff deadline", 500 * time.Millisecond, time.Minute},
		{"client gone", 10 * time.Second, 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peng := newNative(t)
			pnode := startPrefill(t, peng, "p0")
			pf := &staticPrefillers{}
			pf.add("p0", pnode.client)
			deng := newPatientPool(t)
			node := startDecode(t, deng, pf, alwaysRemote, tc.remoteDeadline, tc.remoteDeadline)
			ctx, cancel := context.WithTimeout(context.Background(), tc.clientTimeout)
			defer cancel()
			r, err := generate(t, ctx, node.client, request("r", prompt(15, 40), 0, 0, "p0"))
			c := counters(t, node.reg)
			if v := c["tandem_decode_rejected_total"][`{reason="kv_blocks"}`]; v != 0 {
				t.Errorf("%v kv_blocks refusals, want none (err %v)", v, err)
			}
			switch tc.name {
			case "handoff deadline":
				if err != nil {
					t.Fatalf("request failed instead of falling back: %v", err)
				}
				if r.decision.GetPath() != decodev1.PrefillPath_PREFILL_PATH_FALLBACK || r.decision.GetReason() != "remote_timeout" {
					t.Errorf("path %v reason %q (%s), want fallback remote_timeout", r.decision.GetPath(), r.decision.GetReason(), r.decision.GetDetail())
				}
				if len(r.tokens) == 0 {
					t.Error("no tokens from the local prefill")
				}
			case "client gone":
				if code := connect.CodeOf(err); code != connect.CodeDeadlineExceeded && code != connect.CodeCanceled &&
					!errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("err %v (%v), want the client's own deadline", err, code)
				}
				if v := c["tandem_decode_fallbacks_total"]; len(v) != 0 {
					t.Errorf("fallbacks %v, want none: there is no one to fall back for", v)
				}
			}
			waitIdle(t, "decode", deng)
			waitIdle(t, "prefill", peng)
		})
	}
}
