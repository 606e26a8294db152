package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/internal/testutil"
)

// A deployment with the planner on (one decode worker, two lenders, sim
// engines, a real Consul) moves a lender to prefill when long prompts join
// short ones, without a restart: requests run throughout and none fails, and
// the engines hold no block once they are done. The plan and its reason are in
// Consul KV; a pin freezes it.
func TestPlannerMovesALenderAtRunTime(t *testing.T) {
	rig := startPlannerRig(t, 2)
	rig.router(twitchyPlanner...)
	fe := rig.frontend()
	// Clients sending fresh prompts (no prefix cache to help), a share of them long.
	load := startPlannerLoad(t, fe.addr, 6, 0)

	testutil.WaitForWithin(t, 30*time.Second, "a plan with every lender decoding for short prompts", func() bool {
		p, ok := rig.plan()
		return ok && len(p.Roles) == 2 && prefillRoles(p.Roles) == 0
	})
	load.longShare.Store(20)
	var moved planDoc
	testutil.WaitForWithin(t, 60*time.Second, "the planner moves a lender to prefill as long prompts join", func() bool {
		p, ok := rig.plan()
		moved = p
		return ok && prefillRoles(p.Roles) >= 1
	})
	t.Logf("plan: %s (roles %v)", moved.Reason, moved.Roles)
	if !strings.Contains(moved.Reason, "gain") {
		t.Errorf("the plan's reason %q does not say its gain", moved.Reason)
	}
	// Requests keep running across the switch, and the lender now prefills for the decode worker.
	time.Sleep(2 * time.Second)

	// Pinned at one lender prefilling, the plan holds when the long prompts go.
	if out, err := rig.config("set", "planner", `{"pin": {"prefil": 1}}`); err == nil {
		t.Errorf("tandem config set planner took a misspelt field: %s", out)
	}
	if out, err := rig.config("set", "planner", `{"pin": {"prefill": 1, "isl_threshold": 1024}}`); err != nil {
		t.Fatalf("tandem config set planner: %v %s", err, out)
	}
	testutil.WaitForWithin(t, 10*time.Second, "the plan is pinned at one lender prefilling", func() bool {
		p, ok := rig.plan()
		return ok && p.Pinned && prefillRoles(p.Roles) == 1
	})
	load.longShare.Store(0)
	time.Sleep(3 * time.Second) // ten intervals of short prompts only
	if p, _ := rig.plan(); !p.Pinned || prefillRoles(p.Roles) != 1 {
		t.Errorf("pinned, the plan moved: %s (roles %v)", p.Reason, p.Roles)
	}
	load.end()
	sent, bad, errs := load.counts()
	if bad != 0 {
		t.Errorf("%d of %d requests failed across the switch (first: %v)", bad, sent, errs)
	}
	t.Logf("%d requests, %d failed", sent, bad)
	// No engine holds a block once nothing runs.
	rig.noBlocksHeld()
}
