// Package workersvc runs a worker: an engine behind the decode service (decode and
// aggregated modes) or the prefill service (prefill mode), plus the worker service
// every mode serves.
package workersvc

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/sim"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/services"
	"github.com/tandem-serve/tandem/services/process"
)

// Config is a worker's flags.
type Config struct {
	Serve process.Serve
	// ID names the worker to the router; empty means a generated one.
	ID             string
	Mode           string
	Engine         string
	Model          string
	Seed           uint64
	NumBlocks      int
	BlockSize      int
	SimTimeScale   float64
	PrefillWorkers services.List
}

// RegisterFlags registers the worker's flags; mode is the default --mode.
func (c *Config) RegisterFlags(fs *flag.FlagSet, mode string) {
	c.Serve.RegisterFlags(fs, "127.0.0.1:0")
	fs.StringVar(&c.ID, "id", "", "worker id the router and logs know this worker by (default: mode and a random suffix)")
	fs.StringVar(&c.Mode, "mode", mode, "aggregated, decode (conditional disaggregation) or prefill")
	fs.StringVar(&c.Engine, "engine", "sim", "engine: sim (timing model, no compute)")
	fs.StringVar(&c.Model, "model", "tiny", "model configuration the engine loads")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the model's weights (or of the sim engine's tokens)")
	fs.IntVar(&c.NumBlocks, "kv-blocks", 0, "KV cache blocks (0: the engine's default)")
	fs.IntVar(&c.BlockSize, "block-size", 16, "tokens per KV block; must match the frontend's and router's")
	fs.Float64Var(&c.SimTimeScale, "sim-time-scale", 1, "sim engine: multiply every modelled time by this (0: no waiting)")
	fs.Var(&c.PrefillWorkers, "prefill-workers", "comma-separated prefill worker addresses (static discovery)")
}

// WorkerMode parses the --mode value.
func (c *Config) WorkerMode() (workerv1.WorkerMode, error) {
	switch strings.ToLower(c.Mode) {
	case "aggregated":
		return workerv1.WorkerMode_WORKER_MODE_AGGREGATED, nil
	case "decode":
		return workerv1.WorkerMode_WORKER_MODE_DECODE, nil
	case "prefill":
		return workerv1.WorkerMode_WORKER_MODE_PREFILL, nil
	}
	return 0, fmt.Errorf("--mode %q: want aggregated, decode or prefill", c.Mode)
}

// Validate checks the flags.
func (c *Config) Validate() error {
	if _, err := c.WorkerMode(); err != nil {
		return err
	}
	if c.BlockSize <= 0 {
		return errors.New("--block-size must be positive")
	}
	if c.NumBlocks < 0 {
		return errors.New("--kv-blocks must not be negative")
	}
	if c.SimTimeScale < 0 {
		return errors.New("--sim-time-scale must not be negative")
	}
	switch c.Engine {
	case "sim":
	default:
		return fmt.Errorf("--engine %q: want sim", c.Engine)
	}
	return nil
}

// NewEngine builds the configured engine.
func (c *Config) NewEngine() (engine.Engine, error) {
	switch c.Engine {
	case "sim":
		sc := sim.DefaultConfig()
		sc.Seed, sc.BlockSize, sc.TimeScale = c.Seed, c.BlockSize, c.SimTimeScale
		if c.NumBlocks > 0 {
			sc.NumBlocks = c.NumBlocks
		}
		return sim.New(sc)
	}
	return nil, fmt.Errorf("--engine %q: unknown", c.Engine)
}
