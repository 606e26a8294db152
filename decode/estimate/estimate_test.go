package estimate

import (
	"testing"
	"time"
)

// A worker whose engine moves KV itself (handoffs by reference carry no bytes)
// still warms the cost policy: no bandwidth is needed to move nothing.
func TestEstimatorWarmsWithoutBytes(t *testing.T) {
	var e Estimator
	for range warm {
		e.ObserveLocal(100, 0, 100*time.Millisecond)
		e.ObserveRemote(100, 0, 50*time.Millisecond, 0, 0, 0, 60*time.Millisecond)
	}
	if !e.Estimate(100, 0, 0, 0, 0, 0).Warm {
		t.Error("not warm for a handoff of no bytes")
	}
	if e.Estimate(100, 1<<20, 0, 0, 0, 0).Warm {
		t.Error("warm for a handoff of KV chunks with no bandwidth measured")
	}
}
