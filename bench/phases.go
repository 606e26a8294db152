package bench

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Phase is one stretch of a shifting workload: for Duration, requests of its
// classes arrive as a Poisson process of Rate per second.
type Phase struct {
	Duration time.Duration
	Classes  []Class
	Rate     float64
}

// Bounds of a phases spec, so a typo (60h, @9e9) is an error rather than a run
// that never ends or a flood no server could take.
const (
	maxPhases        = 64
	maxPhaseDuration = 24 * time.Hour
	maxPhaseRate     = 1e5
	maxPhaseTokens   = 1 << 20
)

// ParsePhases parses --phases: comma-separated phases, each
// DURATION:MIX@RATE, where MIX is weight:ISL/OSL classes joined by '+'
// ("60s:0.95:64/64@900,60s:0.2:64/64+0.8:4096/128@40").
func ParsePhases(s string) ([]Phase, error) {
	var phases []Phase
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, fmt.Errorf("bench: --phases: phase %d is empty", i+1)
		}
		ph, err := parsePhase(part)
		if err != nil {
			return nil, fmt.Errorf("bench: --phases: phase %d %q: %w", i+1, part, err)
		}
		phases = append(phases, ph)
		if len(phases) > maxPhases {
			return nil, fmt.Errorf("bench: --phases: more than %d phases", maxPhases)
		}
	}
	return phases, nil
}

func parsePhase(s string) (Phase, error) {
	d, rest, ok := strings.Cut(s, ":")
	mix, rate, ok2 := cutLast(rest, "@")
	if !ok || !ok2 {
		return Phase{}, errors.New("want DURATION:MIX@RATE, e.g. 60s:0.2:64/64+0.8:4096/128@40")
	}
	var ph Phase
	var err error
	if ph.Duration, err = time.ParseDuration(strings.TrimSpace(d)); err != nil || ph.Duration <= 0 || ph.Duration > maxPhaseDuration {
		return Phase{}, fmt.Errorf("duration %q must be a positive Go duration up to %v (60s, 2m)", d, maxPhaseDuration)
	}
	if ph.Rate, err = strconv.ParseFloat(strings.TrimSpace(rate), 64); err != nil || !(ph.Rate > 0 && ph.Rate <= maxPhaseRate) {
		return Phase{}, fmt.Errorf("rate %q must be a positive number of requests/s up to %g", rate, float64(maxPhaseRate))
	}
	var total float64
	for c := range strings.SplitSeq(mix, "+") {
		c = strings.TrimSpace(c)
		w, lens, ok := strings.Cut(c, ":")
		isl, osl, ok2 := strings.Cut(lens, "/")
		if !ok || !ok2 {
			return Phase{}, fmt.Errorf("class %q: want weight:ISL/OSL, e.g. 0.8:4096/128", c)
		}
		var cl Class
		if cl.Weight, err = strconv.ParseFloat(strings.TrimSpace(w), 64); err != nil || !(cl.Weight > 0) || math.IsInf(cl.Weight, 0) {
			return Phase{}, fmt.Errorf("class %q: weight must be a positive number", c)
		}
		if cl.ISL, err = strconv.Atoi(strings.TrimSpace(isl)); err != nil || cl.ISL < 1 || cl.ISL > maxPhaseTokens {
			return Phase{}, fmt.Errorf("class %q: ISL must be an integer in [1, %d]", c, maxPhaseTokens)
		}
		if cl.OSL, err = strconv.Atoi(strings.TrimSpace(osl)); err != nil || cl.OSL < 1 || cl.OSL > maxPhaseTokens {
			return Phase{}, fmt.Errorf("class %q: OSL must be an integer in [1, %d]", c, maxPhaseTokens)
		}
		cl.Name = fmt.Sprintf("%d/%d", cl.ISL, cl.OSL)
		for _, o := range ph.Classes {
			if o.Name == cl.Name {
				return Phase{}, fmt.Errorf("class %s appears twice in the phase; give it one weight", cl.Name)
			}
		}
		total += cl.Weight
		ph.Classes = append(ph.Classes, cl)
	}
	if math.IsInf(total, 0) {
		return Phase{}, errors.New("the weights overflow; use shares such as 0.2 and 0.8")
	}
	return ph, nil
}

// cutLast is strings.Cut at the last sep.
func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// PhaseClass names the class of a request of phase i (0-based) as the
// report shows it: "p2 4096/128", so each phase's figures are read apart.
func PhaseClass(i int, c Class) string { return fmt.Sprintf("p%d %s", i+1, c.Name) }

// Phases is a shifting workload: its phases one after the other, each
// request sent at its own time (a Scheduled run), drawn from its phase's mix.
type Phases struct {
	p      *Prompts
	phases []Phase
	scale  float64
	// IgnoreEOS asks for exactly each class's OSL, as Mixed's.
	IgnoreEOS bool

	mu    sync.Mutex
	at    time.Duration // arrival time of the last request drawn
	phase int
	start time.Duration // start of the current phase
}

// NewPhases returns the shifting workload of phases with every rate
// multiplied by scale (a load of a capacity sweep).
func NewPhases(p *Prompts, phases []Phase, scale float64) (*Phases, error) {
	if len(phases) == 0 {
		return nil, errors.New("bench: a shifting workload needs a phase")
	}
	if !(scale > 0) || math.IsInf(scale, 0) {
		return nil, fmt.Errorf("bench: phases scale %g must be a positive number", scale)
	}
	return &Phases{p: p, phases: phases, scale: scale}, nil
}

// Name implements Workload.
func (w *Phases) Name() string {
	parts := make([]string, len(w.phases))
	for i, ph := range w.phases {
		cs := make([]string, len(ph.Classes))
		for j, c := range ph.Classes {
			cs[j] = fmt.Sprintf("%g:%s", c.Weight, c.Name)
		}
		parts[i] = fmt.Sprintf("%v:%s@%g", ph.Duration, strings.Join(cs, "+"), ph.Rate*w.scale)
	}
	name := "phases " + strings.Join(parts, ",")
	if w.scale != 1 {
		name += fmt.Sprintf(" (scale %g)", w.scale)
	}
	return name
}

// ClassOrder implements ClassOrderer: phase by phase, each phase's classes as given.
func (w *Phases) ClassOrder() []string {
	var names []string
	for i, ph := range w.phases {
		for _, c := range ph.Classes {
			names = append(names, PhaseClass(i, c))
		}
	}
	return names
}

// Longest returns the longest request, for the context check.
func (w *Phases) Longest() (int, string) {
	best, bi := w.phases[0].Classes[0], 0
	for i, ph := range w.phases {
		for _, c := range ph.Classes {
			if c.ISL+c.OSL > best.ISL+best.OSL {
				best, bi = c, i
			}
		}
	}
	return best.ISL + best.OSL, fmt.Sprintf("phase %d class %s: %d prompt and %d output tokens; lower it in --phases", bi+1, best.Name, best.ISL, best.OSL)
}

// Next implements Workload: the next arrival of the current phase's Poisson
// process; one that falls past the phase's end starts the next phase afresh
// (the process is memoryless, so this is exact).
func (w *Phases) Next(rng *rand.Rand) (Request, error) {
	w.mu.Lock()
	var (
		c  Class
		pi int
	)
	for {
		if w.phase >= len(w.phases) {
			w.mu.Unlock()
			return Request{}, ErrWorkloadDone
		}
		ph := w.phases[w.phase]
		end := w.start + ph.Duration
		at := w.at + poissonGap(rng, ph.Rate*w.scale)
		if at < end {
			w.at, pi, c = at, w.phase, pick(rng, ph.Classes)
			break
		}
		w.phase++
		w.start, w.at = end, end
	}
	at := w.at
	w.mu.Unlock()
	prompt, err := w.p.Make(rng, c.ISL)
	if err != nil {
		return Request{}, err
	}
	r := Request{Class: PhaseClass(pi, c), Prompt: prompt, MaxTokens: c.OSL, PromptTokens: c.ISL, IgnoreEOS: w.IgnoreEOS, At: at}
	if w.IgnoreEOS {
		r.WantTokens = c.OSL
	}
	return r, nil
}

// pick draws a class by weight.
func pick(rng *rand.Rand, classes []Class) Class {
	var total float64
	for _, c := range classes {
		total += c.Weight
	}
	x := rng.Float64() * total
	for _, c := range classes {
		if x < c.Weight {
			return c
		}
		x -= c.Weight
	}
	return classes[len(classes)-1]
}

// Done implements Workload.
func (*Phases) Done(Request, *Result) {}
