package router

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// adaptFleet is one aggregated worker (the local class), two decode workers (the
// disaggregated class) holding long contexts, and a prefill worker, gated with
// an adaptive threshold from 1024 within [256, 1792], steps of 256, 3 requests
// of hysteresis.
type adaptFleet struct {
	t    *testing.T
	r    *Router
	reg  *prometheus.Registry
	aggr *Load
	dec  *Load
	pre  *Load
}

// Load is a load report.
type Load = workerv1.Load

var (
	aggrW = Worker{ID: "aggr", Mode: workerv1.WorkerMode_WORKER_MODE_AGGREGATED}
	decW  = []Worker{{ID: "dec1", Mode: workerv1.WorkerMode_WORKER_MODE_DECODE, Policy: "always-remote"},
		{ID: "dec2", Mode: workerv1.WorkerMode_WORKER_MODE_DECODE, Policy: "always-remote"}}
	preW = Worker{ID: "pre", Mode: workerv1.WorkerMode_WORKER_MODE_PREFILL}
)

func newAdaptFleet(t *testing.T, itlWeight float64, fullPass bool) *adaptFleet {
	p := DefaultParams()
	p.ISLGate, p.ISLAdaptive = true, true
	p.ISLThreshold, p.ISLMin, p.ISLMax, p.ISLStep, p.ISLHysteresis, p.ISLMargin = 1024, 256, 1792, 256, 3, 4
	p.ISLITLWeight = itlWeight
	reg := prometheus.NewRegistry()
	r, err := New(Config{BlockSize: 16, Params: p}, rand.New(rand.NewPCG(1, 1)), reg)
	if err != nil {
		t.Fatal(err)
	}
	r.fullPass = fullPass
	return &adaptFleet{t: t, r: r, reg: reg, aggr: &Load{}, dec: &Load{}, pre: &Load{}}
}

// report sends every worker's load as set, which also clears the blocks routed
// to it since: each request then sees the same fleet.
func (f *adaptFleet) report() {
	f.t.Helper()
	send := func(w Worker, l *Load) {
		if err := f.r.Update(w, &workerv1.WatchEventsResponse{Incarnation: "1", Snapshot: &workerv1.Snapshot{}, Load: l}); err != nil {
			f.t.Fatal(err)
		}
	}
	send(aggrW, f.aggr)
	for _, w := range decW {
		send(w, f.dec)
	}
	send(preW, f.pre)
}

// route sends a request of that many tokens (none cached) and returns the class
// it went to.
func (f *adaptFleet) route(tokens int) string {
	f.t.Helper()
	f.report()
	resp, err := f.r.Route(context.Background(), connect.NewRequest(&routerv1.RouteRequest{PromptTokens: uint32(tokens), RequestId: "req"}))
	if err != nil {
		f.t.Fatal(err)
	}
	if resp.Msg.GetDecodeWorker().GetId() == aggrW.ID {
		return "local"
	}
	return "disagg"
}

func (f *adaptFleet) moves(dir string) int {
	return int(value(f.t, f.r.metrics.adaptMoves[map[string]int{"up": 0, "down": 1}[dir]]))
}

func (f *adaptFleet) threshold() int {
	f.t.Helper()
	if g := int(value(f.t, f.r.metrics.threshold)); g != f.r.threshold {
		f.t.Fatalf("gauge %d, threshold in force %d", g, f.r.threshold)
	}
	return f.r.threshold
}

// Decode load on the aggregated worker: 64 sequences decoding, whose every token
// a local prefill delays. Its active blocks are fewer than those of the decode
// workers holding long contexts, so without the ITL term the local class looked
// cheaper and the threshold never came down.
func TestAdaptiveThresholdComesDownUnderDecodeLoad(t *testing.T) {
	for _, full := range []bool{false, true} {
		t.Run(fmt.Sprint("full pass ", full), func(t *testing.T) {
			f := newAdaptFleet(t, 0.25, full)
			f.aggr = &Load{ActiveBlocks: 32, RunningSequences: 64}
			f.dec = &Load{ActiveBlocks: 64, RunningSequences: 4}
			// 200 tokens, 13 blocks: local 13 + 32 + 0.25 x 64 x 13 = 253, disaggregated 13 + 64.
			for i := range 2 {
				if c := f.route(200); c != "local" {
					t.Fatalf("request %d went %s", i, c)
				}
			}
			if got := f.threshold(); got != 1024 {
				t.Fatalf("moved to %d before 3 requests agreed", got)
			}
			for range 30 {
				f.route(200)
			}
			if got, down, up := f.threshold(), f.moves("down"), f.moves("up"); got != 256 || down != 3 || up != 0 {
				t.Fatalf("threshold %d after %d moves down and %d up, want 256 (its minimum) after 3 down", got, down, up)
			}

			// The same fleet without the term: the local class looks cheaper, no move.
			g := newAdaptFleet(t, 0, full)
			g.aggr, g.dec = f.aggr, f.dec
			for range 30 {
				g.route(200)
			}
			if got := g.threshold(); got != 1024 || g.moves("down")+g.moves("up") != 0 {
				t.Fatalf("without the ITL term: threshold %d", got)
			}
		})
	}
}

// Prefill load: the prefill worker has 1,000 blocks queued, so a disaggregated
// request waits for them while the aggregated worker is idle: the threshold goes
// up, to its maximum and no further.
func TestAdaptiveThresholdRisesUnderPrefillLoad(t *testing.T) {
	for _, full := range []bool{false, true} {
		t.Run(fmt.Sprint("full pass ", full), func(t *testing.T) {
			f := newAdaptFleet(t, 0.25, full)
			f.pre = &Load{WaitingTokens: 16_000}
			for range 30 {
				if c := f.route(2048); c != "disagg" {
					t.Fatalf("a 2,048-token prompt went %s with the threshold at %d", c, f.threshold())
				}
			}
			if got, up, down := f.threshold(), f.moves("up"), f.moves("down"); got != 1792 || up != 3 || down != 0 {
				t.Fatalf("threshold %d after %d moves up and %d down, want 1792 (its maximum) after 3 up", got, up, down)
			}
			// The queue drained: nothing says the classes differ, the threshold stays.
			f.pre = &Load{}
			for range 10 {
				f.route(2048)
			}
			if got := f.threshold(); got != 1792 {
				t.Fatalf("moved to %d with no evidence", got)
			}
		})
	}
}

// Hysteresis: evidence each way in turn never adds up to a move.
func TestAdaptiveThresholdNeedsAgreeingRequests(t *testing.T) {
	f := newAdaptFleet(t, 0.25, false)
	for range 20 {
		f.aggr, f.dec, f.pre = &Load{ActiveBlocks: 32, RunningSequences: 64}, &Load{ActiveBlocks: 64}, &Load{}
		f.route(200) // evidence down
		f.aggr, f.dec, f.pre = &Load{}, &Load{}, &Load{WaitingTokens: 16_000}
		f.route(2048) // evidence up
	}
	if got := f.threshold(); got != 1024 || f.moves("up")+f.moves("down") != 0 {
		t.Fatalf("threshold %d after alternating evidence", got)
	}
	if f.r.evidence != 1 {
		t.Fatalf("evidence %d, want the last request's +1", f.r.evidence)
	}
}

// value reads a counter or a gauge.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue() + d.GetGauge().GetValue()
}
