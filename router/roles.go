package router

import (
	"maps"
	"math/bits"

	"google.golang.org/protobuf/proto"

	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// Role is what a lender (an aggregated worker lending prefill) is a candidate
// for, as a planner set it: a worker's role changes without a restart, by
// what the router sends it; what it runs, it serves to the end.
type Role string

const (
	// RolePrefill: only remote prefills for decode workers, no new sequences.
	RolePrefill Role = "prefill"
	// RoleDecode: new sequences (prefilled locally), no prefill to lend.
	RoleDecode Role = "decode"
)

// SetRoles replaces the lenders' roles, by worker ID; a lender not named
// serves both, as without a planner. A role for a worker that is not a lender
// is ignored: its mode fixes what it does.
func (r *Router) SetRoles(roles map[string]Role) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if maps.Equal(roles, r.roles) {
		return
	}
	r.roles = maps.Clone(roles)
	for _, st := range r.order {
		r.setKind(st)
	}
	r.reindexAll()
	r.fleetChange()
}

// dropRoles clears the roles, if any lender is kept from decoding, and says
// whether it did; r.mu is held. The router calls it when no worker is left to
// decode a request: a role must not cost a request.
func (r *Router) dropRoles() bool {
	held := false
	for _, role := range r.roles {
		held = held || role == RolePrefill
	}
	if !held {
		return false
	}
	r.log.Warn("router: the planner's roles left no worker to decode; every lender decodes again", "roles", r.roles)
	r.metrics.rolesDropped.Inc()
	r.roles = nil
	for _, st := range r.order {
		r.setKind(st)
	}
	r.reindexAll()
	r.fleetChange()
	return true
}

// Roles are the roles in force.
func (r *Router) Roles() map[string]Role {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.roles)
}

// SetPlannerView sets the plan WatchFleet shows beside the roles (nil: none).
// v is not changed afterwards; the caller gives a new one for a new plan.
func (r *Router) SetPlannerView(v *routerv1.PlannerView) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if proto.Equal(v, r.plannerView) {
		return
	}
	r.plannerView = v
	r.fleetChange()
}

// lenderRole is st's role when it is a lender ("" otherwise); r.mu is held.
func (r *Router) lenderRole(st *state) Role {
	if st.w.Mode != workerv1.WorkerMode_WORKER_MODE_AGGREGATED || !st.w.LendsPrefill {
		return ""
	}
	return r.roles[st.w.ID]
}

// roleKind is st's kind narrowed by its role; r.mu is held.
func (r *Router) roleKind(st *state) workerKind {
	k := st.kind
	if st.w.Mode != workerv1.WorkerMode_WORKER_MODE_AGGREGATED || !st.w.LendsPrefill || k == 0 {
		return k
	}
	switch r.roles[st.w.ID] {
	case RolePrefill:
		return k & kindPrefill
	case RoleDecode:
		return k &^ kindPrefill
	}
	return k
}

// TrafficBuckets is how many prompt length classes Traffic keeps: powers of
// two from 1 token to 2^(TrafficBuckets-1) and above.
const TrafficBuckets = 21

// Traffic is what the router routed over a period: requests by effective
// prompt length (prompt minus the best cached prefix, rounded down to a power
// of two), with their prompt and effective tokens.
type Traffic struct {
	Requests                int
	PromptTokens, Effective int64
	Count                   [TrafficBuckets]int
	BucketPrompt, BucketEff [TrafficBuckets]int64
}

func (t *Traffic) note(prompt, effective int) {
	b := min(TrafficBuckets-1, bits.Len(uint(max(1, effective)))-1)
	t.Requests++
	t.PromptTokens += int64(prompt)
	t.Effective += int64(effective)
	t.Count[b]++
	t.BucketPrompt[b] += int64(prompt)
	t.BucketEff[b] += int64(effective)
}

// TakeTraffic returns what was routed since the last call, and starts anew.
func (r *Router) TakeTraffic() Traffic {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.traffic
	r.traffic = Traffic{}
	return t
}

// WorkerView is what a planner reads of one worker.
type WorkerView struct {
	Worker
	Role Role // the role in force ("": both, or its mode's)
	// Running sequences and waiting prompt tokens, from its last load report.
	Running, Waiting int
}

// Workers are the workers the router knows, in ID order.
func (r *Router) Workers() []WorkerView {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]WorkerView, 0, len(r.order))
	for _, st := range r.order {
		out = append(out, WorkerView{Worker: st.w, Role: r.roles[st.w.ID], Running: int(st.running), Waiting: int(st.waiting)})
	}
	return out
}
