package integration

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/console"
	"github.com/tandem-serve/tandem/internal/testutil"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
)

// tandem up runs the planner (--planner) over a decode worker and two lenders
// (--lenders), sim engines, no Consul: when long prompts join short ones it
// moves a lender to prefill without a restart, no request fails across the
// switch, and no worker holds a block afterwards. The console's events carry
// the plan, its reason and each lender's role.
func TestUpPlannerMovesALender(t *testing.T) {
	// A dwell of 30 s after the first switch: the shape holds while the test
	// checks it (the 1 s dwell of twitchyPlanner lets a loaded machine's noisy
	// mix move it back within seconds).
	args := append(append([]string{"--engine", "sim", "--decode", "1", "--prefill", "0", "--lenders", "2"}, twitchyPlanner...), "--planner-dwell", "30s")
	proc, url := startUp(t, args...)
	rc, raddr := dialRouter(t, proc)
	_, events := consoleEvents(t, http.DefaultClient, url, "")
	fe := strings.TrimPrefix(url, "http://")
	load := startPlannerLoad(t, fe, 6, 0)

	lenders := func(f console.Fleet) (ids []string, prefilling int) {
		for _, w := range f.Workers {
			if w.Mode == "aggregated" {
				ids = append(ids, w.ID)
			}
			if w.Role == "prefill" {
				prefilling++
			}
		}
		return ids, prefilling
	}
	f := nextEvent(t, events, "fleet", 30*time.Second, "a plan with both lenders decoding", func(f console.Fleet) bool {
		ids, pre := lenders(f)
		return f.Planner != nil && len(ids) == 2 && len(f.Planner.Roles) == 2 && pre == 0
	})
	if f.Planner.Source != "planner" || f.Planner.Reason == "" || f.Planner.Decided == 0 {
		t.Errorf("the console's plan %+v: want this router's planner's, with its reason", f.Planner)
	}
	load.longShare.Store(20)
	f = nextEvent(t, events, "fleet", 60*time.Second, "a lender in the prefill role", func(f console.Fleet) bool {
		_, pre := lenders(f)
		return pre >= 1 && f.Planner != nil && len(f.Planner.Switches) >= 1
	})
	sw := f.Planner.Switches[0]
	t.Logf("switch: %s (roles %v)", sw.Reason, sw.Roles)
	if !strings.Contains(sw.Reason, "gain") || f.Planner.ISLThreshold == 0 || f.Router == nil || !f.Router.ISLGate {
		t.Errorf("the console's plan %+v, router %+v: want the switch's gain, a threshold and gating on", f.Planner, f.Router)
	}
	time.Sleep(3 * time.Second) // requests across the switch
	// The switch is real: a long prompt is prefilled on a lender in the prefill role.
	roles := viewRoles(fleetView(t, raddr))
	s, err := plannerCompletion(fe, "a long prompt after the switch: "+plannerLong, 8)
	if err != nil || roles[s.PrefillWorker] != "prefill" || s.DecodeWorker != "decode-0" {
		t.Errorf("a long prompt after the switch ran %+v (%v); want it prefilled on a lender in the prefill role (%v), decoded on decode-0",
			s, err, roles)
	}
	load.end()
	if sent, bad, errs := load.counts(); bad != 0 {
		t.Errorf("%d of %d requests failed across the switch (first: %v)", bad, sent, errs)
	} else {
		t.Logf("%d requests, none failed", sent)
	}
	if v, ok := metricValue(raddr, "tandem_planner_switches_total"); !ok || v < 1 {
		t.Errorf("tandem_planner_switches_total = %v (%v), want at least 1", v, ok)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	listed, err := rc.ListWorkers(ctx, &routerv1.ListWorkersRequest{})
	if err != nil || len(listed.GetWorkers()) != 3 {
		t.Fatalf("ListWorkers: %v %v", listed, err)
	}
	for _, w := range listed.GetWorkers() {
		testutil.WaitForWithin(t, 30*time.Second, w.GetId()+" holds no block", func() bool {
			st, ok := readPool(w.GetAddress())
			return ok && st.active == 0 && st.running == 0 && st.waiting == 0
		})
	}
}
