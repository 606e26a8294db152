package decode_test

import (
	"context"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/engine"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
)

// loadedEngine is a real engine whose Stats report a decode batch and KV use the
// test sets: the load policy's inputs, without running that many sequences.
type loadedEngine struct {
	engine.Engine
	running, active int
}

func (e *loadedEngine) Stats() engine.Stats {
	st := e.Engine.Stats()
	st.Running, st.ActiveBlocks = e.running, e.active
	return st
}

// The load policy reads the decode worker's own batch and KV pool from its
// engine: the same long prompt is prefilled here while the batch is small and
// sent to the prefill worker once it is not, or once the KV pool is full.
func TestLoadPolicyFollowsTheDecodeBatch(t *testing.T) {
	pf := &staticPrefillers{}
	pre := startPrefill(t, newNative(t), "prefill-0")
	pf.add("prefill-0", pre.client)
	eng := &loadedEngine{Engine: newNative(t)}
	total := eng.Engine.Stats().TotalBlocks
	p := decode.Params{Policy: decode.PolicyLoad, ThresholdParams: decode.ThresholdParams{ShortPrefillThreshold: 16},
		LoadParams: decode.LoadParams{LocalMaxRunning: 2, LocalMaxKVUsage: 0.5}}
	node := startDecode(t, eng, pf, p, time.Second, 10*time.Second)
	for i, tc := range []struct {
		running, active int
		path            decodev1.PrefillPath
		reason          string
	}{
		{0, 0, decodev1.PrefillPath_PREFILL_PATH_LOCAL, "load_decode_idle"},
		{2, total / 4, decodev1.PrefillPath_PREFILL_PATH_LOCAL, "load_decode_idle"},
		{3, total / 4, decodev1.PrefillPath_PREFILL_PATH_REMOTE, "load_decode_busy"},
		{1, total * 3 / 4, decodev1.PrefillPath_PREFILL_PATH_REMOTE, "load_decode_busy"},
	} {
		eng.running, eng.active = tc.running, tc.active
		r, err := generate(t, context.Background(), node.client, request("r", prompt(20+i, 64), 0, 0, "prefill-0"))
		if err != nil {
			t.Fatal(err)
		}
		if r.decision.GetPath() != tc.path || r.decision.GetReason() != tc.reason {
			t.Errorf("running %d, %d of %d blocks active: path %v reason %q (%s), want %v %q", tc.running, tc.active, total,
				r.decision.GetPath(), r.decision.GetReason(), r.decision.GetDetail(), tc.path, tc.reason)
		}
	}
}
