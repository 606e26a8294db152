package plannersvc

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/internal/testutil"
	"github.com/tandem-serve/tandem/planner"
	"github.com/tandem-serve/tandem/router"
)

func testConfig() Config {
	return Config{Enabled: true, Interval: 10 * time.Second, Profile: "h100-llama8b", TTFT: 2 * time.Second, TBT: 100 * time.Millisecond,
		OutputTokens: 512, Dwell: time.Minute, Horizon: 5 * time.Minute, Hysteresis: 0.15, Smoothing: 1}
}

// stepper drives a service over a fake router, ten seconds an interval.
type stepper struct {
	f         *fakeRouter
	s         *Service
	now       time.Time
	published []byte
}

func newStepper(t *testing.T, f *fakeRouter, log *slog.Logger) *stepper {
	t.Helper()
	st := &stepper{f: f, now: time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)}
	s, err := New(testConfig(), f, func(_ context.Context, b []byte) error { st.published = b; return nil }, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	s.last = st.now
	st.s = s
	return st
}

func (st *stepper) step(short, long int) planner.Plan {
	st.now = st.now.Add(10 * time.Second)
	st.f.route(short, 64)
	st.f.route(long, 8192)
	return st.s.Step(context.Background(), st.now)
}

// Each switch is logged at info with what decided it: the reason with its
// figures, the roles, the threshold, the traffic (rate and lengths) and every
// worker's load; decisions that switch nothing are not logged at info.
func TestEachSwitchIsLoggedWithItsInputs(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewJSONHandler(writerFunc(func(b []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return buf.Write(b) }),
		&slog.HandlerOptions{Level: slog.LevelInfo}))
	st := newStepper(t, newFake(), log)
	st.step(9000, 0)
	if buf.Len() != 0 {
		t.Errorf("a decision that switched nothing was logged at info: %s", buf.String())
	}
	p := st.step(360, 40)
	if !p.Switched {
		t.Fatalf("long prompts: %q, want a switch", p.Reason)
	}
	var rec struct {
		Msg          string            `json:"msg"`
		Reason       string            `json:"reason"`
		Roles        map[string]string `json:"roles"`
		Moved        int               `json:"moved"`
		ISLThreshold int               `json:"isl_threshold"`
		Rate         float64           `json:"rate"`
		Lengths      []planner.Length  `json:"lengths"`
		Workers      []planner.Worker  `json:"workers"`
		Projected    float64           `json:"projected_capacity"`
		Best         float64           `json:"best_capacity"`
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d lines logged for one switch: %s", len(lines), buf.String())
	}
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Msg != "planner: switched roles" || rec.Reason != p.Reason || rec.Moved != p.Moved || rec.ISLThreshold != p.Shape.Threshold {
		t.Errorf("logged %+v; want the switch's reason %q, %d moved, threshold %d", rec, p.Reason, p.Moved, p.Shape.Threshold)
	}
	prefill := 0
	for _, r := range rec.Roles {
		if r == "prefill" {
			prefill++
		}
	}
	if prefill != p.Shape.Prefill {
		t.Errorf("logged roles %v, want %d prefilling", rec.Roles, p.Shape.Prefill)
	}
	long := false
	for _, l := range rec.Lengths {
		long = long || l.PromptTokens >= 4096
	}
	if rec.Rate != 40 || !long || len(rec.Workers) != 4 || rec.Projected <= 0 || rec.Best <= 0 {
		t.Errorf("logged inputs: rate %g, lengths %+v, %d workers, capacities %g/%g; want 40 req/s, the long prompts, four workers and both capacities",
			rec.Rate, rec.Lengths, len(rec.Workers), rec.Projected, rec.Best)
	}
}

type writerFunc func([]byte) (int, error)

func (w writerFunc) Write(b []byte) (int, error) { return w(b) }

// The published plan keeps the last switches, newest first, at most
// KeepSwitches, each with its reason and roles; the router's fleet view says
// the same.
func TestThePublishedPlanKeepsTheLastSwitches(t *testing.T) {
	f := newFake()
	st := newStepper(t, f, slog.New(slog.DiscardHandler))
	for i := range KeepSwitches + 3 {
		pin := `{"pin": {"prefill": 1, "isl_threshold": 2048}}`
		if i%2 == 1 {
			pin = `{"pin": {"prefill": 0}}`
		}
		if err := st.s.SetPolicy([]byte(pin)); err != nil {
			t.Fatal(err)
		}
		if p := st.step(100, 0); !p.Switched || !p.Pinned {
			t.Fatalf("pin %d: %+v, want a pinned switch", i, p)
		}
	}
	d, err := ParseDocument(st.published)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Switches) != KeepSwitches {
		t.Fatalf("%d switches kept, want %d", len(d.Switches), KeepSwitches)
	}
	for i := 1; i < len(d.Switches); i++ {
		if !d.Switches[i-1].At.After(d.Switches[i].At) {
			t.Errorf("switches not newest first: %v then %v", d.Switches[i-1].At, d.Switches[i].At)
		}
	}
	newest := d.Switches[0]
	if !newest.At.Equal(st.now) || newest.ISLThreshold != 2048 || !newest.Pinned || !strings.Contains(newest.Reason, "pinned") || !maps.Equal(newest.Roles, d.Roles) {
		t.Errorf("newest switch %+v; want the last plan's (at %v, threshold 2048, pinned, roles %v)", newest, st.now, d.Roles)
	}
	if d.Pin == nil || d.Pin.Prefill != 1 || d.Pin.ISLThreshold != 2048 {
		t.Errorf("published pin %+v, want prefill 1 at 2048", d.Pin)
	}
	v := f.view
	if v.GetSource() != "planner" || v.GetReason() != d.Reason || len(v.GetSwitches()) != KeepSwitches || v.GetPin().GetPrefill() != 1 ||
		v.GetIslThreshold() != 2048 || v.GetRoles()["lender-1"] == "" {
		t.Errorf("router's view %v; want the published plan", v)
	}
}

// A router that runs no planner follows the published plan: the roles, the
// threshold and the view; a bad plan is refused and the last stays; roles the
// router dropped come back; a deleted plan returns every lender to both roles
// and the router to its own threshold.
func TestFollowerAppliesThePublishedPlan(t *testing.T) {
	f := newFake()
	configured := router.DefaultParams()
	configured.ISLThreshold = 777
	f.params = configured
	fl := NewFollower(f, func() router.Params { return configured }, slog.New(slog.DiscardHandler))
	plan := `{"shape": {"Prefill": 1, "Decode": 3, "Threshold": 2048}, "roles": {"lender-1": "prefill", "lender-2": "decode", "lender-3": "decode"},
		"reason": "2P/2D is better", "at": "2026-12-07T06:00:00Z", "pinned": false, "rate": 12.5, "future_field": 1,
		"switches": [{"at": "2026-12-07T06:00:00Z", "reason": "2P/2D is better", "roles": {"lender-1": "prefill"}, "isl_threshold": 2048}]}`
	if err := fl.SetPlan([]byte(plan)); err != nil {
		t.Fatal(err)
	}
	want := map[string]router.Role{"lender-1": router.RolePrefill, "lender-2": router.RoleDecode, "lender-3": router.RoleDecode}
	if !maps.Equal(f.roles, want) || !f.params.ISLGate || f.params.ISLThreshold != 2048 || f.params.ISLAdaptive {
		t.Errorf("followed: roles %v, gate %v threshold %d; want %v gated at 2048", f.roles, f.params.ISLGate, f.params.ISLThreshold, want)
	}
	if v := f.view; v.GetSource() != "consul" || v.GetReason() != "2P/2D is better" || v.GetArrivalRate() != 12.5 || len(v.GetSwitches()) != 1 {
		t.Errorf("view %v, want the plan, from consul", v)
	}
	if p := fl.Overlay(configured); p.ISLThreshold != 2048 || !p.ISLGate {
		t.Errorf("a new tandem/config/router under the plan: %+v, want the plan's gating over it", p)
	}
	for _, bad := range []string{`{"roles": {"lender-1": "both"}}`, `{"shape": {"Threshold": -1}}`, `[]`, `{"roles": {}} {}`, `{"roles": 5}`} {
		if err := fl.SetPlan([]byte(bad)); err == nil {
			t.Errorf("SetPlan(%s) accepted", bad)
		}
	}
	if !maps.Equal(f.roles, want) || f.params.ISLThreshold != 2048 {
		t.Errorf("after bad plans: roles %v, threshold %d; want the last good plan's", f.roles, f.params.ISLThreshold)
	}
	// The router dropped the roles (no worker left to decode); they come back.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var mu sync.Mutex
	locked := &lockedRouter{fakeRouter: f, mu: &mu}
	fl.r = locked
	go func() { defer close(done); fl.Run(ctx, 10*time.Millisecond) }()
	locked.SetRoles(nil)
	testutil.WaitFor(t, "the roles applied again", func() bool { return maps.Equal(locked.Roles(), want) })
	cancel()
	<-done
	fl.r = f
	if err := fl.SetPlan(nil); err != nil {
		t.Fatal(err)
	}
	if len(f.roles) != 0 || f.view != nil || f.params != configured {
		t.Errorf("plan deleted: roles %v, view %v, params %+v; want no roles, no view and the configured params", f.roles, f.view, f.params)
	}
}

// lockedRouter is a fakeRouter safe for the follower's goroutine.
type lockedRouter struct {
	*fakeRouter
	mu *sync.Mutex
}

func (l *lockedRouter) SetRoles(r map[string]router.Role) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fakeRouter.SetRoles(r)
}

func (l *lockedRouter) Roles() map[string]router.Role {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fakeRouter.Roles()
}

// A planner restarted from the published plan gives the router its roles and
// threshold at once, keeps its switches, and holds the dwell from the last
// switch: traffic that would move the lenders back right after does not.
func TestServiceResumesFromThePublishedPlan(t *testing.T) {
	first := newStepper(t, newFake(), slog.New(slog.DiscardHandler))
	first.step(9000, 0)
	if p := first.step(360, 40); !p.Switched {
		t.Fatalf("no switch to resume from: %q", p.Reason)
	}
	d, err := ParseDocument(first.published)
	if err != nil {
		t.Fatal(err)
	}
	f := newFake()
	second := newStepper(t, f, slog.New(slog.DiscardHandler))
	second.now = first.now
	second.s.last = first.now
	second.s.Resume(d)
	if !maps.Equal(f.roles, routerRoles(d.Plan)) || f.params != PlanParams(router.DefaultParams(), d.Plan) || f.view.GetReason() != d.Reason {
		t.Fatalf("resumed: roles %v, params %+v, view %v; want the published plan's", f.roles, f.params, f.view)
	}
	p := second.step(9000, 0)
	if p.Switched || !strings.Contains(p.Reason, "dwell") {
		t.Errorf("right after resuming: %q, want the dwell from the published switch to hold", p.Reason)
	}
	if after, _ := ParseDocument(second.published); len(after.Switches) != 1 || !after.Switches[0].At.Equal(d.Switches[0].At) {
		t.Errorf("switches after resuming: %+v, want the published one kept", after.Switches)
	}
}
