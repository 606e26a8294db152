package planner

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

var (
	shortOnly = []Length{{Share: 1, PromptTokens: 64, OutputTokens: 64}}
	// longMix is long answers with a tenth of long prompts, whose chunks stall
	// the decode steps they are prefilled in.
	longMix = []Length{{Share: 0.9, PromptTokens: 64, OutputTokens: 512}, {Share: 0.1, PromptTokens: 8192, OutputTokens: 512}}
	t0      = time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
)

// fleet is four flexible workers, all decoding.
func fleet() []Worker {
	var ws []Worker
	for _, id := range []string{"w1", "w2", "w3", "w4"} {
		ws = append(ws, Worker{ID: id, Flexible: true, Role: RoleDecode})
	}
	return ws
}

// apply gives the workers the plan's roles, as the wiring does.
func apply(ws []Worker, p Plan) []Worker {
	out := make([]Worker, len(ws))
	for i, w := range ws {
		if r, ok := p.Roles[w.ID]; ok {
			w.Role = r
		}
		out[i] = w
	}
	return out
}

func prefillers(ws []Worker) int {
	n := 0
	for _, w := range ws {
		if w.Role == RolePrefill {
			n++
		}
	}
	return n
}

func newPlanner(t *testing.T) *Planner {
	t.Helper()
	p, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestShortOnlyStaysAggregatedThenLongPromptsMoveWorkersToPrefill(t *testing.T) {
	p := newPlanner(t)
	ws := fleet()
	plan := p.Decide(t0, Observation{Rate: 900, Lengths: shortOnly, Workers: ws, Attainment: -1}, nil)
	if plan.Switched || plan.Shape.Prefill != 0 {
		t.Fatalf("short-only traffic: plan %+v, want every worker decoding", plan)
	}
	ws = apply(ws, plan)
	plan = p.Decide(t0.Add(10*time.Second), Observation{Rate: 40, Lengths: longMix, Workers: ws, Attainment: -1}, nil)
	if !plan.Switched || plan.Shape.Prefill < 1 || plan.Moved != plan.Shape.Prefill {
		t.Fatalf("long-prompt traffic: plan %+v, want workers moved to prefill", plan)
	}
	ws = apply(ws, plan)
	if got := prefillers(ws); got != plan.Shape.Prefill {
		t.Errorf("%d workers prefill after the plan, it says %d", got, plan.Shape.Prefill)
	}
	if !strings.Contains(plan.Reason, "gain") {
		t.Errorf("reason %q does not give the gain", plan.Reason)
	}
	// Back to short prompts: after the dwell the workers return to decoding.
	plan = p.Decide(t0.Add(20*time.Second), Observation{Rate: 900, Lengths: shortOnly, Workers: ws, Attainment: -1}, nil)
	if plan.Switched || !strings.Contains(plan.Reason, "dwell") {
		t.Errorf("within the dwell: plan %+v, want it kept for the dwell", plan)
	}
	plan = p.Decide(t0.Add(2*time.Minute), Observation{Rate: 900, Lengths: shortOnly, Workers: ws, Attainment: -1}, nil)
	if !plan.Switched || plan.Shape.Prefill != 0 || prefillers(apply(ws, plan)) != 0 {
		t.Errorf("short-only again after the dwell: plan %+v, want every worker decoding", plan)
	}
}

// Rates that wander ±10 % around a steady mix move nothing after the first plan.
func TestNoiseDoesNotFlap(t *testing.T) {
	p := newPlanner(t)
	ws := fleet()
	// A mix whose best split beats aggregated serving by little more than the
	// hysteresis: noise could tip it either way.
	mixed := []Length{{Share: 0.8, PromptTokens: 64, OutputTokens: 256}, {Share: 0.2, PromptTokens: 4096, OutputTokens: 256}}
	rng := rand.New(rand.NewPCG(1, 2))
	switches := 0
	for i := range 200 {
		noisy := make([]Length, len(mixed))
		copy(noisy, mixed)
		noisy[1].Share *= 0.9 + 0.2*rng.Float64()
		plan := p.Decide(t0.Add(time.Duration(i)*10*time.Second), Observation{Rate: 60 * (0.9 + 0.2*rng.Float64()), Lengths: noisy, Workers: ws, Attainment: -1}, nil)
		if plan.Switched {
			switches++
		}
		ws = apply(ws, plan)
	}
	if switches != 1 {
		t.Errorf("%d switches in 200 noisy observations of one mix, want one, the first", switches)
	}
}

func TestPinFreezes(t *testing.T) {
	p := newPlanner(t)
	ws := fleet()
	for i := range 10 {
		plan := p.Decide(t0.Add(time.Duration(i)*time.Minute), Observation{Rate: 40, Lengths: longMix, Workers: ws, Attainment: 0.2}, &Pin{Current: true})
		if plan.Switched || !plan.Pinned || prefillers(apply(ws, plan)) != 0 || !strings.Contains(plan.Reason, "pinned") {
			t.Fatalf("pinned at the current shape: plan %+v", plan)
		}
	}
	plan := p.Decide(t0.Add(time.Hour), Observation{Rate: 900, Lengths: shortOnly, Workers: ws, Attainment: -1}, &Pin{Prefill: 1, ISLThreshold: 2048})
	if got := prefillers(apply(ws, plan)); got != 1 || plan.Shape.Threshold != 2048 {
		t.Errorf("pinned at one prefill worker: %d prefill, threshold %d", got, plan.Shape.Threshold)
	}
}

// A switch whose workers would lose a hot cache for a short horizon does not pay.
func TestSwitchThatDoesNotPayIsNotMade(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Horizon, cfg.CacheWarm = time.Minute, time.Hour
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ws := fleet()
	for i := range ws {
		ws[i].HitRate, ws[i].Running = 0.9, 100
	}
	plan := p.Decide(t0, Observation{Rate: 40, Lengths: longMix, Workers: ws, Attainment: -1}, nil)
	if plan.Switched || !strings.Contains(plan.Reason, "cost") {
		t.Errorf("plan %+v, want no switch for its cost", plan)
	}
}

func TestParsePolicy(t *testing.T) {
	p, err := ParsePolicy([]byte(`{"pin": {"prefill": 1, "isl_threshold": 2048}}`))
	if err != nil || p.Pin == nil || p.Pin.Prefill != 1 || p.Pin.ISLThreshold != 2048 {
		t.Fatalf("ParsePolicy = %+v, %v", p, err)
	}
	if p, err := ParsePolicy([]byte(`{"pin": null}`)); err != nil || p.Pin != nil {
		t.Errorf("pin null: %+v, %v", p, err)
	}
	for bad, want := range map[string]string{
		`{"pinn": {}}`: "unknown field",
		`{"pin": {"current": true, "prefill": 1}}`: "current alone",
		`{"pin": {"prefill": -1}}`:                 "pin.prefill",
		`{"pin": {"prefill": 1}}`:                  "isl_threshold",
		`{} {}`:                                    "after",
		`[]`:                                       "JSON object",
	} {
		if _, err := ParsePolicy([]byte(bad)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParsePolicy(%s) = %v, want an error saying %q", bad, err, want)
		}
	}
}

func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{`{"pin": {"prefill": 1, "isl_threshold": 2048}}`, `{"pin": {"current": true}}`, `{}`, `{"pin": 3}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePolicy([]byte(s))
		if err == nil && p.Validate() != nil {
			t.Fatalf("ParsePolicy(%q) accepted an invalid policy %+v", s, p)
		}
	})
}
