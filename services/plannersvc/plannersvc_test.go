package plannersvc

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/planner"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/router"
)

// fakeRouter is a router's planner-facing side: workers, traffic it is told
// to have routed, and the roles and parameters it was given.
type fakeRouter struct {
	workers []router.WorkerView
	traffic router.Traffic
	roles   map[string]router.Role
	params  router.Params
	view    *routerv1.PlannerView
}

func (f *fakeRouter) Workers() []router.WorkerView {
	out := make([]router.WorkerView, len(f.workers))
	for i, w := range f.workers {
		w.Role = f.roles[w.ID]
		out[i] = w
	}
	return out
}
func (f *fakeRouter) TakeTraffic() router.Traffic {
	t := f.traffic
	f.traffic = router.Traffic{}
	return t
}
func (f *fakeRouter) SetRoles(r map[string]router.Role)      { f.roles = maps.Clone(r) }
func (f *fakeRouter) Roles() map[string]router.Role          { return maps.Clone(f.roles) }
func (f *fakeRouter) Params() router.Params                  { return f.params }
func (f *fakeRouter) SetParams(p router.Params) error        { f.params = p; return p.Validate() }
func (f *fakeRouter) SetPlannerView(v *routerv1.PlannerView) { f.view = v }

// route records n requests of prompt tokens over an interval.
func (f *fakeRouter) route(n, prompt int) {
	for range n {
		f.traffic.Requests++
		b := 0
		for 1<<(b+1) <= prompt && b < router.TrafficBuckets-1 {
			b++
		}
		f.traffic.Count[b]++
		f.traffic.BucketPrompt[b] += int64(prompt)
		f.traffic.BucketEff[b] += int64(prompt)
	}
}

func newFake() *fakeRouter {
	f := &fakeRouter{params: router.DefaultParams()}
	f.workers = append(f.workers, router.WorkerView{Worker: router.Worker{ID: "decode-1", Mode: workerv1.WorkerMode_WORKER_MODE_DECODE}})
	for _, id := range []string{"lender-1", "lender-2", "lender-3"} {
		f.workers = append(f.workers, router.WorkerView{Worker: router.Worker{ID: id, Mode: workerv1.WorkerMode_WORKER_MODE_AGGREGATED, LendsPrefill: true}})
	}
	return f
}

func prefilling(f *fakeRouter) int {
	n := 0
	for _, r := range f.roles {
		if r == router.RolePrefill {
			n++
		}
	}
	return n
}

func TestServiceMovesLendersAndPublishes(t *testing.T) {
	f := newFake()
	var published []byte
	cfg := Config{Enabled: true, Interval: 10 * time.Second, Profile: "h100-llama8b", TTFT: 2 * time.Second, TBT: 100 * time.Millisecond,
		OutputTokens: 512, Dwell: time.Minute, Horizon: 5 * time.Minute, Hysteresis: 0.15, Smoothing: 1}
	s, err := New(cfg, f, func(_ context.Context, b []byte) error { published = b; return nil }, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	s.last = now
	step := func(short, long int) planner.Plan {
		now = now.Add(10 * time.Second)
		f.route(short, 64)
		f.route(long, 8192)
		return s.Step(ctx, now)
	}
	// Short-only: every lender decodes, every prompt is prefilled locally.
	step(9000, 0)
	if prefilling(f) != 0 || f.params.ISLThreshold != NoRemote || !f.params.ISLGate {
		t.Fatalf("short-only: roles %v, threshold %d, gate %v; want every lender decoding and no remote prefill", f.roles, f.params.ISLThreshold, f.params.ISLGate)
	}
	// A tenth of long prompts among long answers: lenders move to prefill, and
	// the threshold sends the long prompts to them.
	p := step(360, 40)
	if !p.Switched || prefilling(f) < 1 || f.params.ISLThreshold > 8192 || f.params.ISLAdaptive {
		t.Fatalf("long prompts: plan %q, roles %v, threshold %d; want lenders prefilling for prompts of 8192", p.Reason, f.roles, f.params.ISLThreshold)
	}
	var pub struct {
		Reason string            `json:"reason"`
		Roles  map[string]string `json:"roles"`
		Rate   float64           `json:"rate"`
	}
	if err := json.Unmarshal(published, &pub); err != nil || pub.Reason != p.Reason || pub.Rate != 40 || pub.Roles["lender-1"] == "" {
		t.Errorf("published %s (%v), want the plan with its reason, roles and the rate", published, err)
	}
	// Pinned where it is, it holds when the traffic turns short again.
	if err := s.SetPolicy([]byte(`{"pin": {"current": true}}`)); err != nil {
		t.Fatal(err)
	}
	before := maps.Clone(f.roles)
	for range 20 {
		if p := step(9000, 0); p.Switched || !p.Pinned || !strings.Contains(p.Reason, "pinned") {
			t.Fatalf("pinned: plan %+v", p)
		}
	}
	if !maps.Equal(before, f.roles) {
		t.Errorf("pinned roles moved: %v -> %v", before, f.roles)
	}
	// Unpinned, it moves the lenders back.
	if err := s.SetPolicy([]byte(`{"pin": null}`)); err != nil {
		t.Fatal(err)
	}
	if p := step(9000, 0); !p.Switched || prefilling(f) != 0 {
		t.Errorf("unpinned: plan %q, roles %v; want every lender decoding again", p.Reason, f.roles)
	}
	for _, bad := range []string{`{"pin": {"curent": true}}`, `{"pin": {"prefill": 1}}`, `not json`} {
		if err := s.SetPolicy([]byte(bad)); err == nil {
			t.Errorf("SetPolicy(%s) accepted", bad)
		}
	}
}
