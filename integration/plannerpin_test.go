package integration

import (
	"fmt"
	"maps"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/internal/testutil"
)

// An operator's pin holds: pinned at every lender decoding, long prompts that
// move a lender to prefill within seconds unpinned move nothing; the plan in
// Consul KV says it is pinned and what the planner would do otherwise; once
// unpinned, the same load moves a lender. No request fails.
func TestPlannerPinHolds(t *testing.T) {
	rig := startPlannerRig(t, 2)
	rt := rig.router(twitchyPlanner...)
	fe := rig.frontend()
	if out, err := rig.config("set", "planner", `{"pin": {"prefill": 0}}`); err != nil {
		t.Fatalf("tandem config set planner: %v %s", err, out)
	}
	load := startPlannerLoad(t, fe.addr, 6, 20) // a fifth of the prompts long: enough to move a lender (TestPlannerMovesALenderAtRunTime)
	var p planDoc
	testutil.WaitForWithin(t, 30*time.Second, "a pinned plan", func() bool {
		var ok bool
		p, ok = rig.plan()
		return ok && p.Pinned && len(p.Roles) == 2
	})
	// Twenty intervals of the load that moves a lender, pinned.
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) {
		p, _ = rig.plan()
		if !p.Pinned || prefillRoles(p.Roles) != 0 || p.Switched {
			t.Fatalf("pinned at no prefill, the plan moved: %s (roles %v, pinned %v)", p.Reason, p.Roles, p.Pinned)
		}
		if roles := viewRoles(fleetView(t, rt.addr)); prefillRoles(roles) != 0 {
			t.Fatalf("pinned at no prefill, the router applies roles %v", roles)
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("pinned plan: %s", p.Reason)
	if !strings.Contains(p.Reason, "pinned by the operator") || p.Pin == nil || p.Pin.Prefill != 0 {
		t.Errorf("the pinned plan says %q (pin %+v); want it to say the operator pinned it, and the pin", p.Reason, p.Pin)
	}
	// Why it matters: the planner says what it would do unpinned.
	// Which shape is best depends on the load the planner measured in the window, which
	// a busy machine moves (a CI run saw "3 aggregated"): the reason must name one.
	if !strings.Contains(p.Reason, "best would be ") {
		t.Errorf("the pinned plan says %q; want the best shape it found beside the pin", p.Reason)
	}
	if v, ok := metricValue(rt.addr, "tandem_planner_switches_total"); !ok || v != 0 {
		t.Errorf("tandem_planner_switches_total = %v (%v), want 0 while pinned", v, ok)
	}
	if v, ok := metricValue(rt.addr, `tandem_planner_decisions_total{outcome="pinned"}`); !ok || v < 10 {
		t.Errorf("pinned decisions = %v (%v), want one an interval", v, ok)
	}
	if v, ok := metricValue(rt.addr, "tandem_planner_pinned"); !ok || v != 1 {
		t.Errorf("tandem_planner_pinned = %v (%v), want 1", v, ok)
	}

	// Unpinned, the same load moves a lender: the pin was what held it.
	if out, err := rig.config("set", "planner", `{"pin": null}`); err != nil {
		t.Fatalf("tandem config set planner: %v %s", err, out)
	}
	testutil.WaitForWithin(t, 60*time.Second, "the planner moves a lender once unpinned", func() bool {
		p, _ = rig.plan()
		return !p.Pinned && prefillRoles(p.Roles) >= 1
	})
	t.Logf("unpinned plan: %s", p.Reason)
	load.end()
	if sent, bad, errs := load.counts(); bad != 0 {
		t.Errorf("%d of %d requests failed (first: %v)", bad, sent, errs)
	} else {
		t.Logf("%d requests, none failed", sent)
	}
	rig.noBlocksHeld()
}

// A planner that dies leaves the fleet in its last shape, serving: the router
// running it is killed after it moved a lender; the other router, which
// follows the plan in Consul KV, keeps the roles, and so does a router started
// afterwards without --planner. Requests keep succeeding through them, with
// long prompts prefilled on the lender the planner moved.
func TestPlannerDeathLeavesTheFleetServing(t *testing.T) {
	rig := startPlannerRig(t, 2)
	planning := rig.router(twitchyPlanner...)
	other := rig.router()
	fe := rig.frontend()
	load := startPlannerLoad(t, fe.addr, 6, 0)
	testutil.WaitForWithin(t, 30*time.Second, "a first plan", func() bool { p, ok := rig.plan(); return ok && len(p.Roles) == 2 })
	load.longShare.Store(20)
	var p planDoc
	testutil.WaitForWithin(t, 60*time.Second, "the planner moves a lender to prefill", func() bool {
		var ok bool
		p, ok = rig.plan()
		return ok && prefillRoles(p.Roles) >= 1
	})
	// Kill the planner's router at once, unannounced, under load: within the
	// dwell (1 s) of the switch, so the plan just read is its last.
	if err := planning.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-planning.done
	killed := time.Now()
	t.Logf("plan when the planner was killed: %s (roles %v)", p.Reason, p.Roles)
	testutil.WaitForWithin(t, 30*time.Second, "Consul to see the killed router fail its check", func() bool {
		return len(passing(t, rig.a, "tandem-router")) == 1
	})
	time.Sleep(time.Second) // the frontend's watch of the routers
	sent0, bad0, errs0 := load.counts()
	t.Logf("kill to Consul's notice: %v; %d requests sent so far, %d failed %v", time.Since(killed).Round(time.Millisecond), sent0, bad0, errs0)
	last, _ := rig.plan()
	if prefillRoles(last.Roles) < 1 {
		t.Fatalf("the last plan published has no lender prefilling: %s (roles %v)", last.Reason, last.Roles)
	}
	roles := maps.Clone(last.Roles)
	testutil.WaitForWithin(t, 10*time.Second, "the other router applies the last plan", func() bool {
		v := fleetView(t, other.addr)
		return maps.Equal(viewRoles(v), roles) && v.GetPlanner().GetSource() == "consul"
	})

	// The survivor keeps the roles, and routes with them.
	long := func(router string) {
		t.Helper()
		for i := range 4 {
			s, err := plannerCompletion(fe.addr, fmt.Sprintf("a long prompt through %s, %d: %s", router, i, plannerLong), 8)
			if err != nil {
				t.Errorf("a long prompt through %s: %v", router, err)
				continue
			}
			if s.PrefillWorker == "" || roles[s.PrefillWorker] != "prefill" || roles[s.DecodeWorker] == "prefill" {
				t.Errorf("a long prompt through %s ran %+v; want it prefilled on a lender in the prefill role (%v), decoded elsewhere", router, s, roles)
			}
		}
	}
	time.Sleep(3 * time.Second) // ten of the dead planner's intervals
	if again, _ := rig.plan(); !again.At.Equal(last.At) {
		t.Errorf("a plan was published after the planner died: %s at %v", again.Reason, again.At)
	}
	if got := viewRoles(fleetView(t, other.addr)); !maps.Equal(got, roles) {
		t.Errorf("the surviving router applies roles %v, want the last plan's %v", got, roles)
	}
	long("the surviving router")
	sent1, bad1, _ := load.counts()
	if bad1 != bad0 {
		t.Errorf("through the surviving router %d of %d requests failed %v", bad1-bad0, sent1-sent0, load.errsFrom(bad0))
	}

	// A router started now, without --planner, takes the roles from Consul;
	// the survivor leaves, and requests go through the new one.
	fresh := rig.router()
	testutil.WaitForWithin(t, 10*time.Second, "the new router applies the published roles", func() bool {
		return maps.Equal(viewRoles(fleetView(t, fresh.addr)), roles)
	})
	testutil.WaitForWithin(t, 30*time.Second, "the new router passing in Consul beside the survivor", func() bool {
		return len(passing(t, rig.a, "tandem-router")) == 2
	})
	time.Sleep(time.Second) // the frontend's watch of the routers
	other.stop(t)
	testutil.WaitForWithin(t, 30*time.Second, "only the new router passing", func() bool { return len(passing(t, rig.a, "tandem-router")) == 1 })
	time.Sleep(time.Second)
	sent2, bad2, _ := load.counts()
	if bad2 != bad1 {
		t.Errorf("while the surviving router stopped %d of %d requests failed %v", bad2-bad1, sent2-sent1, load.errsFrom(bad1))
	}
	time.Sleep(3 * time.Second)
	long("the new router")
	load.end()
	sent3, bad3, _ := load.counts()
	if bad3 != bad2 {
		t.Errorf("through the new router %d of %d requests failed %v", bad3-bad2, sent3-sent2, load.errsFrom(bad2))
	}
	t.Logf("%d requests in all; %d failed before the killed router left Consul, %d after", sent3, bad0, bad3-bad0)
	rig.noBlocksHeld()
}
