// Package plannersvc runs the planner beside the router: it reads the traffic
// the router routed and its workers' loads, asks planner for a plan, applies
// it through the router (lenders' roles, the ISL threshold) and publishes it in
// Consul KV.
package plannersvc

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/tandem-serve/tandem/engine/sim"
	"github.com/tandem-serve/tandem/planner"
)

// Config is the planner's flags. It is off unless Enabled.
type Config struct {
	Enabled  bool
	Interval time.Duration
	Profile  string
	TTFT     time.Duration
	TBT      time.Duration
	// OutputTokens is the mean answer length assumed: the router sees prompts,
	// not answers.
	OutputTokens int
	Dwell        time.Duration
	Horizon      time.Duration
	Hysteresis   float64
	// Smoothing is the weight of the newest interval in the averages of the
	// rate and the length mix (1: no smoothing).
	Smoothing float64
}

// RegisterFlags registers the planner's flags, with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	d := planner.DefaultConfig()
	fs.BoolVar(&c.Enabled, "planner", false,
		"run the planner: move lenders (aggregated workers with --lend-prefill) between prefill and decode and set the ISL threshold as the traffic moves; "+
			"its plan is in Consul KV tandem/planner/plan; tandem config set planner '{\"pin\": {\"current\": true}}' freezes it")
	fs.DurationVar(&c.Interval, "planner-interval", 10*time.Second, "planner: how often it decides")
	fs.StringVar(&c.Profile, "planner-profile", "h100-llama8b", "planner: the device model it projects with (a --sim-profile name)")
	fs.DurationVar(&c.TTFT, "planner-ttft", 2*time.Second, "planner: the time-to-first-token objective")
	fs.DurationVar(&c.TBT, "planner-tbt", 100*time.Millisecond, "planner: the time-between-tokens objective")
	fs.IntVar(&c.OutputTokens, "planner-output-tokens", 128, "planner: the mean answer length it assumes, in tokens (the router does not see answers)")
	fs.DurationVar(&c.Dwell, "planner-dwell", d.MinDwell, "planner: least time between two role switches")
	fs.DurationVar(&c.Horizon, "planner-horizon", d.Horizon, "planner: how long a new shape is expected to hold, over which a switch's cost is spread")
	fs.Float64Var(&c.Hysteresis, "planner-hysteresis", d.Hysteresis, "planner: projected capacity gain a switch needs (0.15: 15 %)")
	fs.Float64Var(&c.Smoothing, "planner-smoothing", 0.3, "planner: weight of the newest interval in the averaged rate and mix (1: none)")
}

// Validate checks the flags, and that the profile exists.
func (c Config) Validate() error {
	if !c.Enabled {
		return nil
	}
	switch {
	case c.Interval < 100*time.Millisecond:
		return fmt.Errorf("--planner-interval %v: want at least 100ms", c.Interval)
	case c.OutputTokens < 1:
		return errors.New("--planner-output-tokens must be positive")
	case !(c.Smoothing > 0 && c.Smoothing <= 1):
		return fmt.Errorf("--planner-smoothing %g: want a weight in (0, 1]", c.Smoothing)
	}
	_, err := c.plannerConfig()
	return err
}

func (c Config) plannerConfig() (planner.Config, error) {
	pc := planner.DefaultConfig()
	p, err := sim.ProfileNamed(c.Profile)
	if err != nil {
		return pc, fmt.Errorf("--planner-profile: %w", err)
	}
	pc.Profile = p
	pc.Objectives = planner.Objectives{TTFTMS: float64(c.TTFT) / 1e6, TBTMS: float64(c.TBT) / 1e6}
	pc.MinDwell, pc.Horizon, pc.Hysteresis = c.Dwell, c.Horizon, c.Hysteresis
	return pc, pc.Validate()
}
