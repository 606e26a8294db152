package decode

import (
	"github.com/tandem-serve/tandem/decode/estimate"

	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/sim"
	"github.com/tandem-serve/tandem/handoff"
	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	"github.com/tandem-serve/tandem/proto/tandem/decode/v1/decodev1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// The shed rule on its own: which projections it weighs, and when it says nothing.
func TestShed(t *testing.T) {
	on := Params{Policy: PolicyCost, SLOParams: SLOParams{TTFTSLOMs: 2000}, ShedParams: ShedParams{ShedTTFTFactor: 1}}
	both := paths{local: true, remote: true}
	est := func(localWarm bool, local float64, remoteWarm bool, remote float64) estimate.Estimate {
		return estimate.Estimate{LocalWarm: localWarm, RemoteWarm: remoteWarm, Warm: localWarm && remoteWarm, Local: local, Remote: remote}
	}
	remote := choice{remote: true, reason: "cost_remote_cheaper", detail: "why"}
	local := choice{reason: "cost_local_cheaper", detail: "why"}
	for _, tc := range []struct {
		name string
		p    Params
		est  estimate.Estimate
		c    choice
		ps   paths
		shed bool
	}{
		{"both warm, both past the objective", on, est(true, 5, true, 4), remote, both, true},
		{"both warm, chosen local past, remote too", on, est(true, 5, true, 4), local, both, true},
		{"factor 0 never sheds", Params{Policy: PolicyCost, SLOParams: SLOParams{TTFTSLOMs: 2000}}, est(true, 500, true, 400), remote, both, false},
		{"chosen path cold: never shed", on, est(true, 5, false, 400), remote, both, false},
		{"chosen local cold: never shed", on, est(false, 400, true, 5), local, both, false},
		{"the other path meets it: no shed", on, est(true, 1.5, true, 4), remote, both, false},
		{"the other path cold is not weighed", on, est(false, 0, true, 4), remote, both, true},
		{"the other path not an option is not weighed", on, est(true, 0.1, true, 4), remote, paths{remote: true}, true},
		{"within the factor", Params{Policy: PolicyCost, SLOParams: SLOParams{TTFTSLOMs: 2000}, ShedParams: ShedParams{ShedTTFTFactor: 2.5}},
			est(true, 4.9, true, 4.9), remote, both, false},
		{"past the factor", Params{Policy: PolicyCost, SLOParams: SLOParams{TTFTSLOMs: 2000}, ShedParams: ShedParams{ShedTTFTFactor: 2.5}},
			est(true, 5.1, true, 5.1), remote, both, true},
		// A remote choice with no prefill worker to ask is a local prefill.
		{"remote chosen with no prefill worker weighs local", on, est(true, 1, true, 9), remote, paths{local: true}, false},
	} {
		le := shed(tc.p, situation{prompt: 1000, est: tc.est}, tc.c, tc.ps)
		if (le != nil) != tc.shed {
			t.Errorf("%s: shed %v, want %v (%v)", tc.name, le != nil, tc.shed, le)
			continue
		}
		if le != nil && (le.Reason != RejectTTFTUnmeetable || !strings.Contains(le.Detail, "(decision "+tc.c.reason+": why)")) {
			t.Errorf("%s: %+v, want reason %s quoting the decision", tc.name, le, RejectTTFTUnmeetable)
		}
	}
}

func TestShedParamsValidate(t *testing.T) {
	for _, bad := range []Params{
		{Policy: PolicyThreshold, SLOParams: SLOParams{TTFTSLOMs: 2000}, ShedParams: ShedParams{ShedTTFTFactor: -1}},
		{Policy: PolicyThreshold, SLOParams: SLOParams{TTFTSLOMs: 2000}, ShedParams: ShedParams{ShedTTFTFactor: 1000}},
		{Policy: PolicyThreshold, ShedParams: ShedParams{ShedTTFTFactor: 1}}, // no objective to shed against
	} {
		if bad.Validate() == nil {
			t.Errorf("%+v validated", bad)
		}
	}
	if err := (Params{Policy: PolicyAlwaysRemote, SLOParams: SLOParams{TTFTSLOMs: 2000}, ShedParams: ShedParams{ShedTTFTFactor: 1.5}}).Validate(); err != nil {
		t.Errorf("good shed params: %v", err)
	}
}

// Need against the blocks no running sequence holds.
func TestKVPrecheck(t *testing.T) {
	st := engine.Stats{TotalBlocks: 100, ActiveBlocks: 90, FreeBlocks: 4, CachedBlocks: 6}
	for _, tc := range []struct {
		prompt, cached int
		need           int
		refuse         bool
	}{
		{160, 0, 10, false}, // exactly the room
		{161, 0, 11, true},
		{161, 16, 10, false}, // a cached block needs no new one
		{1600, 1440, 10, false},
	} {
		need, room, refuse := kvPrecheck(st, tc.prompt, tc.cached, 16)
		if need != tc.need || room != 10 || refuse != tc.refuse {
			t.Errorf("prompt %d cached %d: need %d room %d refuse %v, want %d 10 %v", tc.prompt, tc.cached, need, room, refuse, tc.need, tc.refuse)
		}
	}
	if _, _, refuse := kvPrecheck(engine.Stats{}, 100000, 0, 16); refuse {
		t.Error("refused on an engine that reports no pool")
	}
}

// countingPrefillers knows prefill workers by name but has no client for any:
// a request that gets as far as asking one falls back to a local prefill. It
// counts how often it was asked, to tell a refusal before the prefill from one
// after.
type countingPrefillers struct {
	mu    sync.Mutex
	asked int
}

func (p *countingPrefillers) Client(string) (handoff.Client, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked++
	return nil, false
}

func (p *countingPrefillers) Failed(string) {}

func (p *countingPrefillers) IDs() []string { return []string{"p1"} }

func (p *countingPrefillers) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.asked
}

// activeEngine is a sim engine whose Stats report the active blocks the test sets.
type activeEngine struct {
	engine.Engine
	mu     sync.Mutex
	active int
}

func (e *activeEngine) Stats() engine.Stats {
	st := e.Engine.Stats()
	e.mu.Lock()
	defer e.mu.Unlock()
	st.ActiveBlocks = max(st.ActiveBlocks, e.active)
	st.FreeBlocks = max(0, st.TotalBlocks-st.ActiveBlocks-st.CachedBlocks)
	return st
}

type shedNode struct {
	svc    *Service
	client decodev1connect.DecodeServiceClient
	reg    *prometheus.Registry
	pf     *countingPrefillers
	eng    *activeEngine
	seed   int // each prompt distinct, so none is cached
}

func startShed(t *testing.T, p Params, precheck bool) *shedNode {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.TimeScale = 0
	se, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = se.Close() })
	n := &shedNode{reg: prometheus.NewRegistry(), pf: &countingPrefillers{}, eng: &activeEngine{Engine: se}}
	n.svc, err = New(Config{WorkerID: "d1", Mode: workerv1.WorkerMode_WORKER_MODE_DECODE, Params: p,
		MinRemoteDeadline: time.Second, MaxRemoteDeadline: time.Second, KVPrecheck: precheck},
		n.eng, n.pf, slog.New(slog.NewTextHandler(io.Discard, nil)), n.reg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(decodev1connect.NewDecodeServiceHandler(n.svc))
	n.client = decodev1connect.NewDecodeServiceClient(rpctest.Client(t), rpctest.NewServer(t, mux).URL, connect.WithGRPC())
	return n
}

// warmRemote teaches the estimator remote prefills at 0.1 ms a token, with
// whatever queue they had: enough for RemoteWarm.
func (n *shedNode) warmRemote() {
	for _, tokens := range []int{1000, 2000, 4000} {
		pre := time.Duration(tokens) * 100 * time.Microsecond
		n.svc.estimator.ObserveRemote(tokens, 0, pre, 0, 1<<20, 10*time.Millisecond, pre+15*time.Millisecond)
	}
}

// run asks for a prompt of n tokens, telling the decode worker that prefill
// worker p1 has queued tokens waiting.
func (n *shedNode) run(t *testing.T, id string, tokens, queued int) error {
	t.Helper()
	n.seed++
	p := make([]uint32, tokens)
	for i := range p {
		p[i] = uint32(n.seed*7919+i*104729) % 100000
	}
	s, err := n.client.Generate(context.Background(), connect.NewRequest(&decodev1.GenerateRequest{
		RequestId: id, PromptTokenIds: p, MaxTokens: 2,
		PrefillWorkers: []*decodev1.PrefillCandidate{{WorkerId: "p1", QueuedTokens: uint64(queued)}},
	}))
	if err != nil {
		return err
	}
	defer s.Close()
	got := false
	for s.Receive() {
		got = got || len(s.Msg().GetTokenIds()) > 0
	}
	if err := s.Err(); err != nil {
		return err
	}
	if !got {
		t.Fatalf("%s: no tokens and no error", id)
	}
	return nil
}

func (n *shedNode) rejected(t *testing.T) map[string]float64 {
	t.Helper()
	mfs, err := n.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "tandem_decode_rejected_total" {
			for _, m := range mf.GetMetric() {
				if v := m.GetCounter().GetValue(); v != 0 { // every reason is a series from the start
					out[m.GetLabel()[0].GetValue()] = v
				}
			}
		}
	}
	return out
}

// A decode worker with the TTFT shed on refuses at once, before asking a
// prefill worker, a request whose remote TTFT (the prefill worker's queue
// included) is past the objective, once the estimator has measured remote
// prefills; it takes the same request while cold, with the factor at 0, and
// when the queue is short. The refusal is ResourceExhausted, names both
// projections, the objective and the decision, and is counted as
// ttft_unmeetable.
func TestShedTTFTUnmeetable(t *testing.T) {
	const longQueue = 1_000_000 // 100 s at 0.1 ms a token, against a 2 s objective
	p := Params{Policy: PolicyAlwaysRemote, SLOParams: SLOParams{TTFTSLOMs: 2000}, ShedParams: ShedParams{ShedTTFTFactor: 1}}

	cold := startShed(t, p, false)
	if err := cold.run(t, "cold", 500, longQueue); err != nil {
		t.Errorf("cold estimator: %v, want the request taken", err)
	}
	if r := cold.rejected(t); len(r) != 0 {
		t.Errorf("cold estimator refused: %v", r)
	}

	n := startShed(t, p, false)
	n.warmRemote()
	if err := n.run(t, "short-queue", 500, 100); err != nil {
		t.Errorf("warm, short queue: %v, want the request taken", err)
	}
	asked := n.pf.count()
	err := n.run(t, "long-queue", 500, longQueue)
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("warm, long queue: %v, want ResourceExhausted", err)
	}
	t.Logf("refusal: %v", err)
	for _, want := range []string{"decode worker d1 refuses", "TTFT unmeetable", "local not an option (policy always-remote)",
		"remote 100", "queue 100", "above 1 x the TTFT SLO 2000ms", "(decision always_remote: policy always-remote)", "(ShedTTFTFactor 1)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q lacks %q", err, want)
		}
	}
	if n.pf.count() != asked {
		t.Error("a prefill worker was asked for a request shed at admission")
	}
	if r := n.rejected(t); r[RejectTTFTUnmeetable] != 1 || len(r) != 1 {
		t.Errorf("tandem_decode_rejected_total %v, want ttft_unmeetable 1", r)
	}

	// Off, and hot-reloaded on and off again like any policy param.
	if err := n.svc.SetParams(Params{Policy: PolicyAlwaysRemote, SLOParams: SLOParams{TTFTSLOMs: 2000}}); err != nil {
		t.Fatal(err)
	}
	if err := n.run(t, "factor-0", 500, longQueue); err != nil {
		t.Errorf("factor 0: %v, want the request taken", err)
	}
	if err := n.svc.SetParams(Params{Policy: PolicyThreshold, ThresholdParams: ThresholdParams{ShortPrefillThreshold: 64},
		SLOParams: SLOParams{TTFTSLOMs: 2000}, ShedParams: ShedParams{ShedTTFTFactor: 1}}); err != nil {
		t.Fatal(err)
	}
	// threshold sends it remote; local, never measured, is not weighed.
	if err := n.run(t, "threshold", 500, longQueue); connect.CodeOf(err) != connect.CodeResourceExhausted ||
		!strings.Contains(err.Error(), "local not measured yet") {
		t.Errorf("threshold, warm remote, long queue: %v, want ResourceExhausted", err)
	}
	// Once local prefills are measured fast, the local path meets the
	// objective, and the request is not shed even though threshold sends it remote.
	for _, tokens := range []int{100, 200, 400} {
		n.svc.estimator.ObserveLocal(tokens, 0, time.Duration(tokens)*10*time.Microsecond)
	}
	if err := n.run(t, "threshold-local-fast", 500, longQueue); err != nil {
		t.Errorf("threshold, local fast: %v, want the request taken", err)
	}
}

// With KVPrecheck, a request decided remote whose prompt's KV needs more
// blocks than no running sequence holds is refused before any prefill worker is
// asked, as kv_blocks; with room, or with the check off, it is taken.
func TestKVPrecheckRefusesBeforePrefill(t *testing.T) {
	n := startShed(t, Params{Policy: PolicyAlwaysRemote, SLOParams: SLOParams{TTFTSLOMs: 2000}}, true)
	total := n.eng.Stats().TotalBlocks
	if err := n.run(t, "room", 800, 0); err != nil { // 50 blocks
		t.Fatalf("an empty pool: %v", err)
	}
	if n.pf.count() != 1 {
		t.Fatalf("prefill worker asked %d times, want 1", n.pf.count())
	}
	n.eng.mu.Lock()
	n.eng.active = total - 49
	n.eng.mu.Unlock()
	err := n.run(t, "full", 800, 0)
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "refused before prefill: it needs 50 blocks, and 49 of") {
		t.Fatalf("a pool with room for 49 blocks: %v, want ResourceExhausted before prefill", err)
	}
	t.Logf("refusal: %v", err)
	if n.pf.count() != 1 {
		t.Error("a prefill worker was asked for a request refused before prefill")
	}
	if r := n.rejected(t); r[RejectKVBlocks] != 1 || len(r) != 1 {
		t.Errorf("tandem_decode_rejected_total %v, want kv_blocks 1", r)
	}
	if err := n.run(t, "fits", 784, 0); err != nil { // 49 blocks
		t.Errorf("a prompt of 49 blocks in room for 49: %v", err)
	}

	off := startShed(t, Params{Policy: PolicyAlwaysRemote, SLOParams: SLOParams{TTFTSLOMs: 2000}}, false)
	off.eng.active = total - 49
	if err := off.run(t, "off", 800, 0); err != nil || off.pf.count() != 1 {
		t.Errorf("precheck off: %v, asked %d, want the prefill worker asked", err, off.pf.count())
	}
}
