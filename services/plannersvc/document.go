package plannersvc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"time"

	"github.com/tandem-serve/tandem/planner"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	"github.com/tandem-serve/tandem/router"
)

// Document is the plan as the planner publishes it (Consul KV
// tandem/planner/plan): what routers that do not run the planner apply, what
// a restarted planner resumes from, and what the console shows.
type Document struct {
	planner.Plan
	// Rate and Lengths are the averaged traffic the plan was decided on.
	Rate    float64          `json:"rate"`
	Lengths []planner.Length `json:"lengths"`
	// Switches are the last plans that changed a lender's role, newest first.
	Switches []Switch `json:"switches,omitempty"`
}

// Switch is one plan that changed some lender's role, with the traffic that
// decided it.
type Switch struct {
	At           time.Time               `json:"at"`
	Reason       string                  `json:"reason"`
	Roles        map[string]planner.Role `json:"roles"`
	ISLThreshold int                     `json:"isl_threshold"`
	Pinned       bool                    `json:"pinned"`
	Rate         float64                 `json:"rate"`
}

// KeepSwitches is how many switches a Document keeps.
const KeepSwitches = 10

// maxDocumentBytes bounds a document: a plan for a thousand workers is well
// under it.
const maxDocumentBytes = 1 << 20

// ParseDocument decodes a published plan and checks what a router would apply
// of it: the roles and the threshold. Fields it does not know are allowed, so
// that routers of an older release follow a newer planner's plan.
func ParseDocument(b []byte) (Document, error) {
	var d Document
	if len(b) > maxDocumentBytes {
		return d, fmt.Errorf("planner plan: %d bytes, more than %d", len(b), maxDocumentBytes)
	}
	if t := bytes.TrimSpace(b); len(t) == 0 || t[0] != '{' {
		return d, errors.New("planner plan: want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		return Document{}, fmt.Errorf("planner plan: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Document{}, errors.New("planner plan: data after the JSON object")
	}
	for id, r := range d.Roles {
		if r != planner.RolePrefill && r != planner.RoleDecode {
			return Document{}, fmt.Errorf("planner plan: worker %q has role %q: want prefill or decode", id, r)
		}
	}
	if s := d.Shape; s.Prefill < 0 || s.Decode < 0 || s.Threshold < 0 || s.Threshold > NoRemote {
		return Document{}, fmt.Errorf("planner plan: shape %+v: want counts and a threshold in [0, %d]", s, NoRemote)
	}
	return d, nil
}

// routerRoles are the plan's roles as the router takes them.
func routerRoles(p planner.Plan) map[string]router.Role {
	roles := make(map[string]router.Role, len(p.Roles))
	for id, r := range p.Roles {
		roles[id] = router.Role(r)
	}
	return roles
}

// PlanParams is p with the plan's gating: the ISL gate on, the adaptive
// threshold off, and the plan's threshold (NoRemote when no worker prefills
// for others).
func PlanParams(p router.Params, plan planner.Plan) router.Params {
	p.ISLGate, p.ISLAdaptive, p.ISLThreshold = true, false, plan.Shape.Threshold
	if plan.Shape.Prefill == 0 || p.ISLThreshold == 0 {
		p.ISLThreshold = NoRemote
	}
	return p
}

// applyRoles gives the router the plan's roles, when they differ.
func applyRoles(r Router, plan planner.Plan) {
	if roles := routerRoles(plan); !maps.Equal(roles, r.Roles()) {
		r.SetRoles(roles)
	}
}

// View is d as the router's fleet stream shows it; source says who applies it
// ("planner" or "consul").
func (d Document) View(source string) *routerv1.PlannerView {
	v := &routerv1.PlannerView{
		Source: source, DecidedUnixMs: d.At.UnixMilli(), Reason: d.Reason,
		PrefillWorkers: uint32(max(0, d.Shape.Prefill)), DecodeWorkers: uint32(max(0, d.Shape.Decode)),
		Roles: stringRoles(d.Roles), Pinned: d.Pinned,
		ArrivalRate: d.Rate, ProjectedCapacity: d.Projected.Capacity, BestCapacity: d.Best.Capacity,
	}
	if d.Shape.Prefill > 0 {
		v.IslThreshold = uint32(d.Shape.Threshold)
	}
	if pin := d.Pin; pin != nil {
		v.Pin = &routerv1.PlannerPin{Current: pin.Current, Prefill: uint32(max(0, pin.Prefill)), IslThreshold: uint32(max(0, pin.ISLThreshold))}
	}
	for _, s := range d.Switches {
		v.Switches = append(v.Switches, &routerv1.PlannerSwitch{
			AtUnixMs: s.At.UnixMilli(), Reason: s.Reason, Roles: stringRoles(s.Roles), IslThreshold: uint32(max(0, s.ISLThreshold)), Pinned: s.Pinned,
		})
	}
	return v
}

func stringRoles(roles map[string]planner.Role) map[string]string {
	out := make(map[string]string, len(roles))
	for id, r := range roles {
		out[id] = string(r)
	}
	return out
}
