package integration

import (
	"os/exec"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/internal/testutil"
)

// A lender switched to prefill in the middle of a long decode serves that
// decode to its end: the request completes with every token asked for, while
// the lender, now in the prefill role, prefills long prompts for the decode
// worker and short prompts decode elsewhere; nothing fails, and no worker
// holds a block afterwards.
func TestPlannerSwitchFinishesALongDecode(t *testing.T) {
	rig := startPlannerRig(t, 1)
	lender := rig.lenders[0]
	rt := rig.router(twitchyPlanner...)
	fe := rig.frontend()

	// The long decode goes to the lender: the decode worker is drained while
	// it is routed.
	if out, err := exec.Command(tandemBin, "drain", rig.decode.addr).CombinedOutput(); err != nil {
		t.Fatalf("tandem drain: %v %s", err, out)
	}
	testutil.WaitForWithin(t, 10*time.Second, "the router sees the decode worker draining", func() bool {
		for _, w := range fleetView(t, rt.addr).GetWorkers() {
			if w.GetWorker().GetId() == "decode-p1" {
				return w.GetWorker().GetDraining()
			}
		}
		return false
	})
	const maxTokens = 3000 // about 17 s of the mocker profile's decode steps
	type result struct {
		s   served
		err error
		end time.Time
	}
	done := make(chan result, 1)
	go func() {
		s, err := plannerCompletionWith(fe.addr, "a long answer, please: "+plannerShort, maxTokens, true, 3*time.Minute)
		done <- result{s, err, time.Now()}
	}()
	testutil.WaitForWithin(t, 30*time.Second, "the long decode running on the lender", func() bool {
		st, ok := readPool(lender.addr)
		return ok && st.running == 1
	})
	if out, err := exec.Command(tandemBin, "drain", rig.decode.addr, "--undo").CombinedOutput(); err != nil {
		t.Fatalf("tandem drain --undo: %v %s", err, out)
	}
	// The operator's pin makes the switch now, whatever the planner's model
	// says: the lender prefills, prompts of 1024 tokens and more go to it.
	if out, err := rig.config("set", "planner", `{"pin": {"prefill": 1, "isl_threshold": 1024}}`); err != nil {
		t.Fatalf("tandem config set planner: %v %s", err, out)
	}
	testutil.WaitForWithin(t, 30*time.Second, "the router applies the lender's prefill role", func() bool {
		return viewRoles(fleetView(t, rt.addr))["lender-1"] == "prefill"
	})
	switched := time.Now()
	if st, ok := readPool(lender.addr); !ok || st.running != 1 {
		t.Fatalf("the long decode was over before the switch (lender: %+v); make it longer", st)
	}
	p, _ := rig.plan()
	t.Logf("switched during the long decode: %s", p.Reason)

	// While it decodes, the lender takes no new decode, and prefills long prompts.
	for i := range 6 {
		prompt, long := plannerShort, i%2 == 1
		if long {
			prompt = plannerLong
		}
		s, err := plannerCompletion(fe.addr, "beside the long decode "+string(rune('a'+i))+": "+prompt, 8)
		switch {
		case err != nil:
			t.Errorf("a request beside the switch: %v", err)
		case s.DecodeWorker != "decode-p1":
			t.Errorf("a request after the switch decoded on %q, want decode-p1 (the lender prefills only)", s.DecodeWorker)
		case long && s.PrefillWorker != "lender-1":
			t.Errorf("a long prompt after the switch: %+v, want it prefilled on lender-1", s)
		}
	}
	if st, ok := readPool(lender.addr); !ok || st.running != 1 {
		t.Logf("the long decode ended before the requests beside it did (lender: %+v)", st)
	}

	r := <-done
	if r.err != nil {
		t.Fatalf("the long decode across the switch: %v", r.err)
	}
	if r.s.DecodeWorker != "lender-1" || r.s.Finish != "length" || r.s.Completion != maxTokens {
		t.Errorf("the long decode: %+v; want all %d tokens from lender-1, finished by length", r.s, maxTokens)
	}
	if !r.end.After(switched) {
		t.Errorf("the long decode ended at %v, before the switch was seen at %v", r.end, switched)
	}
	t.Logf("the long decode ended %v after the switch", r.end.Sub(switched).Round(time.Millisecond))
	rig.noBlocksHeld()
}
