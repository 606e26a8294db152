package planner

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tandem-serve/tandem/engine/sim"
)

// Role is what a worker does in a plan.
type Role string

const (
	// RolePrefill serves only remote prefills for decode workers.
	RolePrefill Role = "prefill"
	// RoleDecode decodes, prefilling short prompts locally.
	RoleDecode Role = "decode"
)

// Worker is what the planner sees of one worker.
type Worker struct {
	ID string
	// Flexible: the planner may change its role (an aggregated worker that
	// lends prefill); the others keep Role.
	Flexible bool
	Role     Role
	// Running sequences and waiting prompt tokens, from its load report.
	Running, Waiting int
	// HitRate is the share of its prompts' tokens its prefix cache held.
	HitRate float64
}

// Observation is the fleet and its traffic, smoothed by the caller.
type Observation struct {
	// Rate is the arrival rate, requests per second.
	Rate float64
	// Lengths is the traffic's mix of prompt and output lengths.
	Lengths []Length
	Workers []Worker
	// Attainment is the share of recent requests that met every objective
	// (negative: unknown). Below Config.Attainment the planner is quicker to act.
	Attainment float64
}

// Plan is the fleet's shape the planner wants, and why.
type Plan struct {
	Shape Shape `json:"shape"`
	// Roles are the flexible workers' roles, by worker ID.
	Roles map[string]Role `json:"roles"`
	// Reason says in one sentence why this plan, with its figures.
	Reason string `json:"reason"`
	// Projected is the model's view of this plan; Best of the best shape it
	// found (the same unless hysteresis, dwell or cost held it back).
	Projected Projection `json:"projected"`
	Best      Projection `json:"best"`
	// Switched: this plan changed some worker's role; Moved counts them.
	Switched bool `json:"switched"`
	Moved    int  `json:"moved"`
	Pinned   bool `json:"pinned"`
	// Pin is the operator's pin that held this plan, when Pinned.
	Pin *Pin      `json:"pin,omitempty"`
	At  time.Time `json:"at"`
}

// Config is the planner's fixed configuration.
type Config struct {
	Profile    sim.Profile
	Objectives Objectives
	// Thresholds are the ISL thresholds it chooses from.
	Thresholds []int
	// Hysteresis is the relative gain in score a switch must project
	// (0.15: the new shape's score 15 % below the current one's).
	Hysteresis float64
	// MinDwell is the least time between two switches of a worker's role.
	MinDwell time.Duration
	// Horizon is the time a switch's cost is spread over: how long a new shape
	// is expected to hold.
	Horizon time.Duration
	// CacheWarm is how long a switched worker's lost prefix cache costs as
	// much as being drained, at a hit rate of 1.
	CacheWarm time.Duration
	// Attainment below which the hysteresis is halved.
	Attainment float64
}

// DefaultConfig is the h100-llama8b profile and the objectives of the
// policy rounds (TTFT 2 s, TBT 100 ms).
func DefaultConfig() Config {
	p, _ := sim.ProfileNamed("h100-llama8b")
	return Config{
		Profile: p, Objectives: Objectives{TTFTMS: 2000, TBTMS: 100},
		Thresholds: []int{256, 512, 1024, 2048, 4096, 8192},
		Hysteresis: 0.15, MinDwell: time.Minute, Horizon: 5 * time.Minute, CacheWarm: 30 * time.Second,
		Attainment: 0.9,
	}
}

// Validate names the first field that is wrong.
func (c Config) Validate() error {
	switch {
	case c.Profile.KVTokens < 1 || c.Profile.MaxNumSeqs < 1:
		return errors.New("planner: the device profile has no KV pool or batch limit")
	case !(c.Objectives.TTFTMS > 0) || !(c.Objectives.TBTMS > 0):
		return errors.New("planner: TTFT and TBT objectives must be positive")
	case len(c.Thresholds) == 0:
		return errors.New("planner: give at least one ISL threshold")
	case !(c.Hysteresis >= 0 && c.Hysteresis < 1):
		return fmt.Errorf("planner: hysteresis %g: want a share in [0, 1)", c.Hysteresis)
	case c.MinDwell < 0 || c.Horizon <= 0 || c.CacheWarm < 0:
		return errors.New("planner: dwell and cache warm-up must not be negative, the horizon must be positive")
	}
	for _, t := range c.Thresholds {
		if t < 1 {
			return fmt.Errorf("planner: ISL threshold %d must be positive", t)
		}
	}
	return nil
}

// Planner decides plans one observation after another; it keeps the last
// plan, and when it switched. It is not safe for concurrent use.
type Planner struct {
	cfg        Config
	last       *Plan
	lastSwitch time.Time
}

// New returns a planner.
func New(cfg Config) (*Planner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Planner{cfg: cfg}, nil
}

// Last is the last plan decided (nil before the first).
func (p *Planner) Last() *Plan { return p.last }

// Resume starts from a plan decided before (by a planner that stopped), whose
// last switch was at lastSwitch: its threshold is the current one, and the
// dwell runs from that switch.
func (p *Planner) Resume(plan Plan, lastSwitch time.Time) {
	p.last = &plan
	p.lastSwitch = lastSwitch
}

// Decide returns the plan for obs at now; a pin, when not nil, is applied as
// given (its Prefill workers prefill, the rest decode), whatever the model says.
func (p *Planner) Decide(now time.Time, obs Observation, pin *Pin) Plan {
	if len(obs.Workers) == 0 {
		plan := Plan{Roles: map[string]Role{}, Reason: "no worker to plan for", At: now, Pinned: pin != nil, Pin: pin}
		p.last = &plan
		return plan
	}
	cur := p.current(obs)
	fixedPrefill, flex := 0, 0
	for _, w := range obs.Workers {
		switch {
		case w.Flexible:
			flex++
		case w.Role == RolePrefill:
			fixedPrefill++
		}
	}
	n := len(obs.Workers)
	capOf := func(s Shape) float64 { return Capacity(&p.cfg.Profile, s, obs.Lengths, p.cfg.Objectives) }
	proj := func(s Shape) Projection { return Project(&p.cfg.Profile, s, obs.Rate, obs.Lengths, p.cfg.Objectives) }
	curCap := capOf(cur)
	best, bestCap := cur, curCap
	for pre := fixedPrefill; pre <= fixedPrefill+flex && pre < n; pre++ {
		ths := p.cfg.Thresholds
		if pre == 0 {
			ths = []int{0}
		}
		for _, t := range ths {
			// A capacity within 1 % is a tie, which the first shape found
			// (fewer prefill workers, lower threshold) keeps.
			if s := (Shape{Prefill: pre, Decode: n - pre, Threshold: t}); s != cur {
				if c := capOf(s); c > bestCap*1.01 && c > 0 {
					best, bestCap = s, c
				}
			}
		}
	}
	curProj, bestProj := proj(cur), proj(best)
	curProj.Capacity, bestProj.Capacity = curCap, bestCap
	plan := Plan{Shape: cur, Projected: curProj, Best: bestProj, At: now}
	keep := func(reason string, args ...any) Plan {
		plan.Roles = roles(obs)
		plan.Reason = fmt.Sprintf(reason, args...)
		p.last = &plan
		return plan
	}
	if pin != nil {
		s := cur
		if !pin.Current {
			s = Shape{Prefill: min(max(pin.Prefill, fixedPrefill), fixedPrefill+flex, n-1), Threshold: pin.ISLThreshold}
			s.Decode = n - s.Prefill
		}
		pinned := *pin
		plan.Shape, plan.Pinned, plan.Pin = s, true, &pinned
		plan.Projected = proj(s)
		plan.Projected.Capacity = capOf(s)
		plan.Moved = p.move(&plan, obs, s.Prefill-fixedPrefill)
		plan.Switched = plan.Moved > 0
		plan.Reason = fmt.Sprintf("pinned by the operator at %s (best would be %s)", describe(s, plan.Projected), describe(best, bestProj))
		if plan.Switched {
			p.lastSwitch = now
		}
		p.last = &plan
		return plan
	}
	if best == cur {
		return keep("%s is the best shape for %.3g req/s", describe(cur, curProj), obs.Rate)
	}
	gain := math.Inf(1)
	if curCap > 0 {
		gain = bestCap/curCap - 1
	}
	need := p.cfg.Hysteresis
	if obs.Attainment >= 0 && obs.Attainment < p.cfg.Attainment || obs.Rate > curCap {
		// Objectives missed, or projected to be: act on a smaller gain.
		need /= 2
	}
	if gain < need {
		return keep("keeping %s: %s gains %.0f%%, under the %.0f%% hysteresis", describe(cur, curProj), describe(best, bestProj), 100*gain, 100*need)
	}
	if best.Prefill == cur.Prefill {
		// Only the threshold moves: no worker drains, nothing is lost.
		plan.Shape, plan.Projected = best, bestProj
		plan.Roles = roles(obs)
		plan.Reason = fmt.Sprintf("threshold %d -> %d: %s over %s, a %.0f%% gain at no cost", cur.Threshold, best.Threshold,
			describe(best, bestProj), describe(cur, curProj), 100*gain)
		p.last = &plan
		return plan
	}
	if since := now.Sub(p.lastSwitch); !p.lastSwitch.IsZero() && since < p.cfg.MinDwell {
		return keep("keeping %s: %s would gain %.0f%%, but the last switch was %v ago (dwell %v)", describe(cur, curProj),
			describe(best, bestProj), 100*gain, since.Round(time.Second), p.cfg.MinDwell)
	}
	cost := p.switchCost(obs, cur, best, fixedPrefill)
	if gain <= cost {
		return keep("keeping %s: %s gains %.0f%%, not more than its cost of %.0f%% (draining and lost cache over %v)",
			describe(cur, curProj), describe(best, bestProj), 100*gain, 100*cost, p.cfg.Horizon)
	}
	plan.Shape, plan.Projected = best, bestProj
	plan.Moved = p.move(&plan, obs, best.Prefill-fixedPrefill)
	plan.Switched = plan.Moved > 0
	plan.Reason = fmt.Sprintf("%s -> %s at %.3g req/s: a %.0f%% gain against a cost of %.0f%%", describe(cur, curProj),
		describe(best, bestProj), obs.Rate, 100*gain, 100*cost)
	p.lastSwitch = now
	p.last = &plan
	return plan
}

func describe(s Shape, pr Projection) string {
	if s.Prefill == 0 {
		return fmt.Sprintf("%d aggregated (capacity %.3g req/s)", s.Decode, pr.Capacity)
	}
	return fmt.Sprintf("%dP/%dD@%d (capacity %.3g req/s)", s.Prefill, s.Decode, s.Threshold, pr.Capacity)
}

// current is the shape the fleet has: the last plan's, or what the workers say.
func (p *Planner) current(obs Observation) Shape {
	s := Shape{}
	for _, w := range obs.Workers {
		if w.Role == RolePrefill {
			s.Prefill++
		} else {
			s.Decode++
		}
	}
	s.Threshold = p.cfg.Thresholds[len(p.cfg.Thresholds)/2]
	if p.last != nil {
		s.Threshold = p.last.Shape.Threshold
	}
	if s.Prefill == 0 {
		s.Threshold = 0
	}
	return s
}

// switchCost is the share of the fleet's capacity over the horizon a switch
// from cur to next loses: each worker that changes role serves its running
// sequences out (drained capacity) and loses its prefix cache.
func (p *Planner) switchCost(obs Observation, cur, next Shape, fixedPrefill int) float64 {
	var osl float64
	var total float64
	for _, l := range obs.Lengths {
		osl += l.Share * float64(l.OutputTokens)
		total += l.Share
	}
	if total > 0 {
		osl /= total
	}
	step := p.cfg.Profile.StepMS(1, 0.5, false, 0) / 1000
	var lost float64 // worker-seconds
	for _, w := range p.toMove(obs, next.Prefill-fixedPrefill) {
		// A worker with sequences serves them out, all in one batch, half their
		// answers left on average; an idle one drains at once.
		drain := float64(min(w.Running, 1)) * osl / 2 * step
		lost += drain + w.HitRate*p.cfg.CacheWarm.Seconds()
	}
	n := float64(max(1, len(obs.Workers)))
	return lost / (n * p.cfg.Horizon.Seconds())
}

// toMove picks the flexible workers whose role changes so that prefill of
// them prefill: the least busy, whose switch drains and loses least.
func (p *Planner) toMove(obs Observation, prefill int) []Worker {
	var pre, dec []Worker
	for _, w := range obs.Workers {
		if !w.Flexible {
			continue
		}
		if w.Role == RolePrefill {
			pre = append(pre, w)
		} else {
			dec = append(dec, w)
		}
	}
	busy := func(a, b Worker) int {
		return cmp.Or(cmp.Compare(a.Running+a.Waiting/1024, b.Running+b.Waiting/1024), cmp.Compare(a.HitRate, b.HitRate), strings.Compare(a.ID, b.ID))
	}
	switch {
	case prefill > len(pre):
		slices.SortFunc(dec, busy)
		return dec[:min(len(dec), prefill-len(pre))]
	case prefill < len(pre):
		slices.SortFunc(pre, busy)
		return pre[:len(pre)-prefill]
	}
	return nil
}

// move sets plan.Roles so that prefill flexible workers prefill, switching
// those toMove picks, and returns how many it switched.
func (p *Planner) move(plan *Plan, obs Observation, prefill int) int {
	moving := p.toMove(obs, prefill)
	plan.Roles = roles(obs)
	for _, w := range moving {
		if w.Role == RolePrefill {
			plan.Roles[w.ID] = RoleDecode
		} else {
			plan.Roles[w.ID] = RolePrefill
		}
	}
	return len(moving)
}

// roles are the flexible workers' roles as they are.
func roles(obs Observation) map[string]Role {
	r := map[string]Role{}
	for _, w := range obs.Workers {
		if w.Flexible {
			r[w.ID] = cmp.Or(w.Role, RoleDecode)
		}
	}
	return r
}
