package decode_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/engine/sim"
	"github.com/tandem-serve/tandem/engine/sim/simtest"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
)

// The cost policy warms on long prompts: while nothing runs on the worker it
// prefills them here (a free measurement: no sequence's ITL pays for it) until
// its local side is measured, and only then follows the threshold while the
// remote side is cold. Before, with every prompt over the threshold, it sent
// everything remote and never measured a local prefill.
func TestCostWarmsOnLongPromptsWhileIdle(t *testing.T) {
	eng := simtest.New(t, func(c *sim.Config) { c.TimeScale = 1 })
	p := decode.DefaultParams()
	p.Policy, p.ShortPrefillThreshold = decode.PolicyCost, 64
	node := startDecode(t, eng, &staticPrefillers{}, p, time.Second, 10*time.Second)
	for i := range 4 {
		req := request(fmt.Sprintf("r%d", i), prompt(40+i, 600+100*i), 0, 0)
		req.MaxTokens = 2
		r, err := generate(t, context.Background(), node.client, req)
		if err != nil {
			t.Fatal(err)
		}
		d := r.decision
		switch {
		case i < 3 && (d.GetPath() != decodev1.PrefillPath_PREFILL_PATH_LOCAL || d.GetReason() != "cost_cold_idle"):
			t.Errorf("request %d on an idle, unmeasured worker: %s %s (%s), want local cost_cold_idle", i, d.GetPath(), d.GetReason(), d.GetDetail())
		case i == 3 && d.GetPath() == decodev1.PrefillPath_PREFILL_PATH_LOCAL:
			// Three local prefills measured: the remote side is the cold one now,
			// and the threshold sends the long prompt remote (no prefill worker
			// here, so it falls back).
			t.Errorf("request %d after three measured local prefills: %s %s (%s), want remote by the threshold", i, d.GetPath(), d.GetReason(),
				d.GetDetail())
		}
		waitIdle(t, "decode", eng)
	}
}
