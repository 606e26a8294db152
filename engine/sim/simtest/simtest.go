// Package simtest gives tests a sim engine set up as they need one, so that the
// engine's own tests and the services' tests built on it make it the same way.
package simtest

import (
	"testing"

	"github.com/tandem-serve/tandem/engine/sim"
)

// New returns a sim engine with sim.DefaultConfig, modelled time off (TimeScale
// 0: a test waits for no modelled prefill or decode), changed by mod when it is
// not nil; the engine is closed when t ends.
func New(t testing.TB, mod func(*sim.Config)) *sim.Engine {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.TimeScale = 0
	if mod != nil {
		mod(&cfg)
	}
	e, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}
