package plannersvc

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/planner"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/router"
)

// Router is what the planner needs of the router it runs beside.
type Router interface {
	Workers() []router.WorkerView
	TakeTraffic() router.Traffic
	SetRoles(map[string]router.Role)
	Roles() map[string]router.Role
	Params() router.Params
	SetParams(router.Params) error
	SetPlannerView(*routerv1.PlannerView)
}

var _ Router = (*router.Router)(nil)

// Publish writes the plan where an operator reads it (Consul KV); nil: nowhere.
type Publish func(ctx context.Context, plan []byte) error

// NoRemote is the threshold the router is given when no worker prefills for
// others: every prompt is prefilled where it is decoded.
const NoRemote = 1 << 20

// Service runs the planner.
type Service struct {
	cfg     Config
	r       Router
	publish Publish
	log     *slog.Logger
	m       *metrics
	pl      *planner.Planner

	mu  sync.Mutex
	pin *planner.Pin
	// doc is the last plan decided, with the switches before it.
	doc *Document
	// Averages of the traffic, per second (Config.Smoothing).
	rate               float64
	count, prompt, eff [router.TrafficBuckets]float64
	last               time.Time
}

// New returns a planner service over r.
func New(cfg Config, r Router, publish Publish, log *slog.Logger, reg prometheus.Registerer) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pc, err := cfg.plannerConfig()
	if err != nil {
		return nil, err
	}
	pl, err := planner.New(pc)
	if err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, r: r, publish: publish, log: log, m: newMetrics(reg), pl: pl}, nil
}

// SetPolicy applies the planner's runtime policy (tandem/config/planner),
// decoded strictly; a bad one is an error and the last good one stays.
func (s *Service) SetPolicy(b []byte) error {
	p, err := planner.ParsePolicy(b)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.pin = p.Pin
	s.mu.Unlock()
	pinned := 0.0
	if p.Pin != nil {
		pinned = 1
	}
	s.m.pinned.Set(pinned)
	return nil
}

// Run decides every interval until ctx ends. The roles it set stay in the
// router when it stops: the fleet keeps its last shape.
func (s *Service) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	s.r.TakeTraffic() // what came before it started is no interval of its own
	s.last = time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.Step(ctx, now)
		}
	}
}

// Step observes, decides and applies once, at now.
func (s *Service) Step(ctx context.Context, now time.Time) planner.Plan {
	obs := s.observe(now)
	s.mu.Lock()
	pin := s.pin
	last := s.doc
	s.mu.Unlock()
	var switches []Switch
	if last != nil {
		switches = last.Switches
		if len(obs.Workers) == 0 {
			// The router knows no worker (just started, or Consul lost them for a
			// moment): nothing to decide on, and the last plan stays.
			s.log.Debug("planner: no worker to plan for; the last plan stays")
			return last.Plan
		}
	}
	plan := s.pl.Decide(now, obs, pin)
	doc := Document{Plan: plan, Rate: obs.Rate, Lengths: obs.Lengths, Switches: switches}
	if plan.Switched {
		sw := Switch{At: now, Reason: plan.Reason, Roles: plan.Roles, Pinned: plan.Pinned, Rate: obs.Rate}
		if plan.Shape.Prefill > 0 {
			sw.ISLThreshold = plan.Shape.Threshold
		}
		doc.Switches = append([]Switch{sw}, switches[:min(len(switches), KeepSwitches-1)]...)
	}
	s.mu.Lock()
	s.doc = &doc
	s.mu.Unlock()
	s.apply(plan)
	s.r.SetPlannerView(doc.View("planner"))
	s.m.note(plan, obs)
	if plan.Switched {
		s.log.Info("planner: switched roles", "reason", plan.Reason, "roles", plan.Roles, "moved", plan.Moved,
			"isl_threshold", plan.Shape.Threshold, "prefill_workers", plan.Shape.Prefill, "decode_workers", plan.Shape.Decode,
			"rate", obs.Rate, "lengths", obs.Lengths, "workers", obs.Workers, "attainment", obs.Attainment,
			"projected_capacity", plan.Projected.Capacity, "best_capacity", plan.Best.Capacity, "pinned", plan.Pinned)
	} else {
		s.log.Debug("planner: decided", "reason", plan.Reason, "rate", obs.Rate)
	}
	if s.publish != nil {
		b, err := json.Marshal(doc)
		if err == nil {
			err = s.publish(ctx, b)
		}
		if err != nil {
			s.log.Warn("planner: could not publish the plan", "error", err)
		}
	}
	return plan
}

// Resume starts from a plan a planner published before (this one, before a
// restart, or another): the router gets its roles and threshold at once, the
// dwell runs from its last switch, and its switches are kept.
func (s *Service) Resume(doc Document) {
	var lastSwitch time.Time
	if len(doc.Switches) > 0 {
		lastSwitch = doc.Switches[0].At
	}
	s.pl.Resume(doc.Plan, lastSwitch)
	s.mu.Lock()
	s.doc = &doc
	s.mu.Unlock()
	s.apply(doc.Plan)
	s.r.SetPlannerView(doc.View("planner"))
	s.log.Info("planner: resumed from the published plan", "reason", doc.Reason, "roles", doc.Roles, "decided", doc.At)
}

// Overlay is p with the last plan's gating (PlanParams), or p before any plan:
// the router's service lays it over tandem/config/router, which the planner's
// threshold overrides.
func (s *Service) Overlay(p router.Params) router.Params {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.doc == nil {
		return p
	}
	return PlanParams(p, s.doc.Plan)
}

// observe takes the traffic since the last step into the averages and reads
// the workers.
func (s *Service) observe(now time.Time) planner.Observation {
	t := s.r.TakeTraffic()
	dt := now.Sub(s.last).Seconds()
	if s.last.IsZero() || dt <= 0 {
		dt = s.cfg.Interval.Seconds()
	}
	s.last = now
	a := s.cfg.Smoothing
	ewma := func(old *float64, v float64) { *old = (1-a)**old + a*v }
	ewma(&s.rate, float64(t.Requests)/dt)
	var prompt, eff int64
	for i := range s.count {
		ewma(&s.count[i], float64(t.Count[i])/dt)
		ewma(&s.prompt[i], float64(t.BucketPrompt[i])/dt)
		ewma(&s.eff[i], float64(t.BucketEff[i])/dt)
		prompt, eff = prompt+t.BucketPrompt[i], eff+t.BucketEff[i]
	}
	hit := 0.0
	if prompt > 0 {
		hit = 1 - float64(eff)/float64(prompt)
	}
	obs := planner.Observation{Rate: s.rate, Attainment: -1}
	for i, c := range s.count {
		if c <= 1e-9 {
			continue
		}
		e := s.eff[i] / c
		obs.Lengths = append(obs.Lengths, planner.Length{
			Share: c, PromptTokens: max(1, int(e)), CachedTokens: max(0, int((s.prompt[i]-s.eff[i])/c)), OutputTokens: s.cfg.OutputTokens,
		})
	}
	for _, w := range s.r.Workers() {
		if w.Draining {
			continue // it takes nothing new, whatever its role
		}
		pw := planner.Worker{ID: w.ID, Running: w.Running, Waiting: w.Waiting, HitRate: hit, Role: planner.RoleDecode}
		switch {
		case w.Mode == workerv1.WorkerMode_WORKER_MODE_PREFILL:
			pw.Role = planner.RolePrefill
		case w.Mode == workerv1.WorkerMode_WORKER_MODE_AGGREGATED && w.LendsPrefill:
			pw.Flexible = true
			if w.Role == router.RolePrefill {
				pw.Role = planner.RolePrefill
			}
		}
		obs.Workers = append(obs.Workers, pw)
	}
	return obs
}

// apply gives the router the plan's roles and threshold.
func (s *Service) apply(plan planner.Plan) {
	applyRoles(s.r, plan)
	if p := s.r.Params(); PlanParams(p, plan) != p {
		if err := s.r.SetParams(PlanParams(p, plan)); err != nil {
			s.log.Error("planner: the router refused the plan's threshold", "error", err, "isl_threshold", plan.Shape.Threshold)
		}
	}
}
