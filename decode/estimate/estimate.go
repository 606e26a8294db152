// Package estimate holds the decode worker's estimators: what it learns from
// its own measurements and what it projects from them, for the decision in
// package decode to weigh. Estimator fits each prefill path's time as a line
// per engine step (estimate.go, linfit.go); StepFit fits an engine step's time
// against what it held, from the steps an engine reports (stepfit.go);
// StepModel learns the plain step from token gaps when it reports none
// (stepmodel.go); Streams keeps the live sequences' gaps and works out their
// TPOT and TBT slack under a prefill's stretch (running.go, tbt.go).
package estimate

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ewma is an exponentially weighted mean that knows how many samples it has seen.
type ewma struct {
	value float64
	n     int
}

func (e *ewma) add(x float64) {
	if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
		return
	}
	const alpha = 0.2
	if e.n == 0 {
		e.value = x
	} else {
		e.value += alpha * (x - e.value)
	}
	e.n++
}

// warm is how many samples each coefficient needs before the cost policy trusts it.
const warm = 3

// Line is a fitted prefill time: Fixed seconds for each engine step the prompt
// takes (a chunk of at most the step's token budget), plus PerToken seconds for
// each computed token. An engine step's fixed cost (reading the weights, the
// decode batch's KV beside it) is paid once per chunk, whatever its length, so
// a per-token average of short prompts would charge it to every token of a long
// one, many times what the prompt costs.
type Line struct {
	Fixed, PerToken float64
	// N is how many prefills the fit holds.
	N int
}

// Chunks is how many engine steps a prefill of tokens takes under a step budget
// of chunk tokens (0: unknown, taken as one step).
func Chunks(tokens, chunk int) int {
	if tokens <= 0 {
		return 0
	}
	if chunk <= 0 {
		return 1
	}
	return (tokens + chunk - 1) / chunk
}

// Seconds is the line's time for tokens computed in chunks of at most chunk.
func (l Line) Seconds(tokens, chunk int) float64 {
	return l.Fixed*float64(Chunks(tokens, chunk)) + l.PerToken*float64(max(tokens, 0))
}

func (l Line) String() string {
	return fmt.Sprintf("%.2fms/step + %.2fus/token (%d prefills)", l.Fixed*1e3, l.PerToken*1e6, l.N)
}

// Estimator learns, from this worker's own measurements, how long prefill takes
// here and remotely and how fast KV crosses the link.
type Estimator struct {
	mu sync.Mutex
	// local is the time from a decision to prefill here to the first token,
	// per engine step, against the prompt tokens computed for it per step: the
	// prompt's own and those waiting here when it came (first come, first
	// served, they go first). Queueing is thus learnt with the tokens that
	// cause it, not as compute: a prompt's own prefill measured from its first
	// chunk (the first version) shared its steps with the tail of the queue
	// ahead, which made a short prompt look like a whole step (a 57 ms fixed
	// cost on the trace, against a modelled 1.7 ms).
	local linearFit
	// remote is the same of remote prefills: the prefill worker's reported
	// queue wait and prefill time against its queue at the decision (as the
	// decision saw it) plus the tokens computed.
	remote    linearFit
	bandwidth ewma // KV bytes per second, prefill worker to here
	overhead  ewma // seconds of a remote prefill not explained by queue, prefill and transfer
	// Chunk is this engine's step budget in tokens (engine.Info.MaxBatchedTokens),
	// assumed to be the prefill workers' too; 0: unknown, each prompt one step.
	Chunk int
}

// Safe defaults before warm-up, used only to bound deadlines: generous enough that
// a healthy prefill is never cut off while the estimator learns.
const (
	defaultPerToken  = 2e-3 // 500 tokens/s
	defaultFixed     = 0.02
	defaultBandwidth = 50e6 // 50 MB/s
	defaultOverhead  = 0.05
)

func (e *Estimator) get(m *ewma, def float64) float64 {
	if m.n == 0 {
		return def
	}
	return m.value
}

// observe adds a prefill of tokens that took d, as one point per step it took.
func (e *Estimator) observe(f *linearFit, tokens int, d time.Duration) {
	if tokens <= 0 || d <= 0 {
		return
	}
	k := float64(Chunks(tokens, e.Chunk))
	f.add(float64(tokens)/k, d.Seconds()/k)
}

// ObserveLocal records a local prefill of tokens computed tokens, decided when
// queued tokens waited here, whose first token came d after the decision.
func (e *Estimator) ObserveLocal(tokens, queued int, d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.observe(&e.local, max(queued, 0)+tokens, d)
}

// ObserveRemote records a remote prefill: tokens computed there after queued
// tokens (as the decision saw its queue), its queue wait and prefill time as it
// reports them, bytes moved in transfer time, and the total seen from here.
func (e *Estimator) ObserveRemote(tokens, queued int, prefill, queue time.Duration, bytes int, transfer, total time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.observe(&e.remote, max(queued, 0)+tokens, queue+prefill)
	if bytes > 0 && transfer > 0 {
		e.bandwidth.add(float64(bytes) / transfer.Seconds())
	}
	// The queue wait is estimated with the queue (Estimate.RemoteQueue);
	// counting it here too would charge it twice.
	e.overhead.add(max(0, (total - queue - prefill - transfer).Seconds()))
}

func line(f *linearFit) Line {
	a, b, ok := f.fit()
	if !ok {
		return Line{Fixed: defaultFixed, PerToken: defaultPerToken}
	}
	return Line{Fixed: a, PerToken: b, N: f.count()}
}

// Lines are the fitted local and remote prefill times.
func (e *Estimator) Lines() (local, remote Line) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return line(&e.local), line(&e.remote)
}

// Estimate is the predicted cost of each path, in seconds.
type Estimate struct {
	// Warm is both sides warm; LocalWarm and RemoteWarm each (remote: its
	// prefill times and, for a handoff of KV bytes, the link's bandwidth).
	Warm, LocalWarm, RemoteWarm bool
	// Local is the local queue and the prompt's prefill: the time to its first token.
	Local float64
	// LocalPrefill is the prompt's prefill alone, what it stalls a running sequence.
	LocalPrefill float64
	ITLPenalty   float64 // weighted stall of the running sequences
	Remote       float64 // remote queue + remote prefill + transfer + overhead
	RemoteQueue  float64
	// The fits behind the figures, for explain.
	LocalLine, RemoteLine Line
	Chunk                 int
}

// Estimate predicts both paths for effective tokens to compute, kvBytes to move,
// and the queues on each side.
func (e *Estimator) Estimate(effective, kvBytes, localQueuedTokens, remoteQueuedTokens, running int, itlWeight float64) Estimate {
	e.mu.Lock()
	defer e.mu.Unlock()
	lp, rp := line(&e.local), line(&e.remote)
	bw := e.get(&e.bandwidth, defaultBandwidth)
	oh := e.get(&e.overhead, defaultOverhead)
	est := Estimate{
		// An engine that moves KV itself (a handoff by reference) reports no bytes:
		// its transfer time is in the measured overhead, and no bandwidth is ever
		// learnt, nor needed.
		LocalWarm:  e.local.count() >= warm,
		RemoteWarm: e.remote.count() >= warm && (e.bandwidth.n >= warm || kvBytes == 0),
		LocalLine:  lp, RemoteLine: rp, Chunk: e.Chunk,
		// The prompts waiting here are prefilled in the same steps, first come
		// first served: the new one's first token comes after all of them.
		Local:        lp.Seconds(localQueuedTokens+effective, e.Chunk),
		LocalPrefill: lp.Seconds(effective, e.Chunk),
	}
	// The queue there drains at the prefill worker's rate: its tokens at the
	// fitted slope, plus a step's fixed cost per budget's worth of them. Not a
	// per-token average of recent prefills, which swung with what shared their
	// steps.
	remote := rp.Seconds(remoteQueuedTokens+effective, e.Chunk)
	est.RemoteQueue = max(0, remote-rp.Seconds(effective, e.Chunk))
	est.Warm = est.LocalWarm && est.RemoteWarm
	est.ITLPenalty = itlWeight * float64(running) * est.LocalPrefill
	est.Remote = remote + float64(kvBytes)/bw + oh
	return est
}

// RemoteDeadline bounds a remote prefill: a multiple of its estimate, never less
// than lo nor more than hi, so a slow worker is abandoned but a healthy one is not.
func RemoteDeadline(est Estimate, lo, hi time.Duration) time.Duration {
	d := time.Duration((3*est.Remote + 1) * float64(time.Second))
	return min(max(d, lo), hi)
}

// RegisterGauges publishes the fitted lines, read at each scrape.
func RegisterGauges(reg prometheus.Registerer, e *Estimator) {
	g := func(name, help string, f func(local, remote Line) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(e.Lines()) })
	}
	reg.MustRegister(
		g("tandem_decode_estimate_local_fixed_seconds",
			"Fitted fixed cost of each engine step of a local prefill (least squares over the last 64 local prefills; a default before any).",
			func(l, _ Line) float64 { return l.Fixed }),
		g("tandem_decode_estimate_local_seconds_per_token", "Fitted cost of each computed prompt token of a local prefill.",
			func(l, _ Line) float64 { return l.PerToken }),
		g("tandem_decode_estimate_remote_fixed_seconds",
			"Fitted fixed cost of each engine step of a remote prefill, from the prefill workers' reported prefill times (last 64).",
			func(_, r Line) float64 { return r.Fixed }),
		g("tandem_decode_estimate_remote_seconds_per_token", "Fitted cost of each computed prompt token of a remote prefill.",
			func(_, r Line) float64 { return r.PerToken }),
	)
}
