package plannersvc

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/tandem-serve/tandem/router"
)

// Follower applies the plan a planner published (tandem/planner/plan) to a
// router that does not run the planner: every router then routes with the
// same roles and threshold, and a planner that stops (or whose router dies)
// leaves the fleet in its last shape, on every router, a restarted one too.
type Follower struct {
	r   Router
	log *slog.Logger
	// configured is the router's parameters without a plan (its flags and
	// tandem/config/router), restored when the plan is deleted.
	configured func() router.Params

	mu  sync.Mutex
	doc *Document
}

// NewFollower returns a follower of the published plan for r.
func NewFollower(r Router, configured func() router.Params, log *slog.Logger) *Follower {
	return &Follower{r: r, configured: configured, log: log}
}

// SetPlan applies a published plan (WatchKey's value), checked first: a bad
// one is an error and the last good one stays. nil, the key deleted, returns
// every lender to both roles and the router to its configured threshold.
func (f *Follower) SetPlan(b []byte) error {
	if b == nil {
		f.mu.Lock()
		had := f.doc != nil
		f.doc = nil
		f.mu.Unlock()
		if had {
			f.r.SetRoles(nil)
			f.r.SetPlannerView(nil)
			if err := f.r.SetParams(f.configured()); err != nil {
				return err
			}
			f.log.Info("planner: the published plan was deleted; every lender serves both roles again")
		}
		return nil
	}
	d, err := ParseDocument(b)
	if err != nil {
		return err
	}
	f.mu.Lock()
	prev := f.doc
	f.doc = &d
	f.mu.Unlock()
	if err := f.apply(d); err != nil {
		return err
	}
	if prev == nil || !maps.Equal(prev.Roles, d.Roles) || prev.Shape != d.Shape {
		f.log.Info("planner: following the published plan", "reason", d.Reason, "roles", d.Roles, "decided", d.At)
	}
	return nil
}

// Overlay is p with the followed plan's gating, or p without one.
func (f *Follower) Overlay(p router.Params) router.Params {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.doc == nil {
		return p
	}
	return PlanParams(p, f.doc.Plan)
}

// Run applies the followed plan again every interval until ctx ends: the
// router drops roles that leave no worker to decode, and without a planner
// alive no new plan would give them back.
func (f *Follower) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.mu.Lock()
			d := f.doc
			f.mu.Unlock()
			if d != nil {
				if err := f.apply(*d); err != nil {
					f.log.Warn("planner: the router refused the followed plan", "error", err)
				}
			}
		}
	}
}

func (f *Follower) apply(d Document) error {
	applyRoles(f.r, d.Plan)
	f.r.SetPlannerView(d.View("consul"))
	if p := f.r.Params(); PlanParams(p, d.Plan) != p {
		return f.r.SetParams(PlanParams(p, d.Plan))
	}
	return nil
}
