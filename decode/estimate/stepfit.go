package estimate

import (
	"fmt"
	"math"
	"sync"

	"github.com/tandem-serve/tandem/engine"
)

// stepFit is an engine step's time against what the step held, fitted by least
// squares to the engine's own step reports (engine.StepReporter):
//
//	seconds = a + b·decode + c·prefill tokens + d·prefill pairs + e·KV usage
//
// The gaps a worker's streams see cannot give this: on a worker that prefills
// without pause every gap is a stretched step, so their per-batch median
// (stepModel) takes a stretched step for a plain one and then adds the chunk
// again, and the TBT rule sends prompts away that it had room for. The terms are what a step costs on a
// GPU: the weights read once (a), each sequence's row (b), each prompt token's
// compute (c), attention over the chunk's context (d, the pairs), the KV the
// batch reads (e). A plain step is the fit at no prefill; a stretched one at a
// chunk of the prompt.
//
// The last stepFitWindow reports, solved again at most once per stepFitEvery
// new ones, with a little ridge so that a term the window never varied (no
// prefill at all) shrinks to nothing instead of making the system singular;
// such a term is then not trusted (stepGuess.ok, plainOK).
const (
	stepFitWindow = 512
	stepFitEvery  = 32
	stepFitWarm   = 64 // reports before the fit is used at all
	stepFitSpread = 8  // steps of each kind a projection needs (see project)
	stepTerms     = 5
)

// Term scales keep the normal equations' entries near one.
var stepScale = [stepTerms]float64{1, 1.0 / 256, 1.0 / 2048, 1.0 / (1 << 22), 1}

type StepFit struct {
	mu    sync.Mutex
	x     [stepFitWindow][stepTerms]float64
	y     [stepFitWindow]float64
	next  int
	n     int
	fresh int // reports since the last solve
	// coef is the last solution; plainN and prefillN count the window's steps
	// without and with a prompt chunk, and minPrefill/maxPrefill the chunk
	// sizes, when it was solved.
	coef                   [stepTerms]float64
	solved                 bool
	plainN, prefillN       int
	minPrefill, maxPrefill int
	total                  uint64 // reports ever, for the explanation
}

func stepRow(decode, prefill int, pairs, kvUsage float64) [stepTerms]float64 {
	r := [stepTerms]float64{1, float64(decode), float64(prefill), pairs, kvUsage}
	for i := range r {
		r[i] *= stepScale[i]
	}
	return r
}

// Observe records one step; called on the engine's stepping goroutine.
func (f *StepFit) Observe(r engine.StepReport) {
	if !(r.Seconds > 0) || math.IsInf(r.Seconds, 0) || r.Decode < 0 || r.PrefillTokens < 0 || !(r.PrefillPairs >= 0) {
		return
	}
	if r.Decode == 0 && r.PrefillTokens == 0 {
		return
	}
	f.mu.Lock()
	f.x[f.next] = stepRow(r.Decode, r.PrefillTokens, r.PrefillPairs, r.KVUsage)
	f.y[f.next] = r.Seconds
	f.next = (f.next + 1) % stepFitWindow
	f.n = min(f.n+1, stepFitWindow)
	f.fresh++
	f.total++
	f.mu.Unlock()
}

// solveLocked refits when stepFitEvery reports came since the last fit.
func (f *StepFit) solveLocked() {
	if f.n < stepFitWarm || (f.solved && f.fresh < stepFitEvery) {
		return
	}
	var a [stepTerms][stepTerms + 1]float64
	f.plainN, f.prefillN, f.minPrefill, f.maxPrefill = 0, 0, math.MaxInt, 0
	for i := range f.n {
		row := &f.x[i]
		for j := range stepTerms {
			for k := range stepTerms {
				a[j][k] += row[j] * row[k]
			}
			a[j][stepTerms] += row[j] * f.y[i]
		}
		if p := int(math.Round(row[2] / stepScale[2])); p > 0 {
			f.prefillN++
			f.minPrefill, f.maxPrefill = min(f.minPrefill, p), max(f.maxPrefill, p)
		} else {
			f.plainN++
		}
	}
	// Ridge: a thousandth of the mean diagonal, the intercept left free.
	tr := 0.0
	for j := range stepTerms {
		tr += a[j][j]
	}
	for j := 1; j < stepTerms; j++ {
		a[j][j] += 1e-3 * tr / stepTerms
	}
	coef, ok := solveGauss(a)
	if !ok {
		return
	}
	f.coef, f.solved, f.fresh = coef, true, 0
}

// solveGauss solves the augmented system by elimination with partial pivoting.
func solveGauss(a [stepTerms][stepTerms + 1]float64) (x [stepTerms]float64, ok bool) {
	for c := range stepTerms {
		p := c
		for r := c + 1; r < stepTerms; r++ {
			if math.Abs(a[r][c]) > math.Abs(a[p][c]) {
				p = r
			}
		}
		if math.Abs(a[p][c]) < 1e-12 {
			return x, false
		}
		a[c], a[p] = a[p], a[c]
		for r := c + 1; r < stepTerms; r++ {
			m := a[r][c] / a[c][c]
			for k := c; k <= stepTerms; k++ {
				a[r][k] -= m * a[c][k]
			}
		}
	}
	for r := stepTerms - 1; r >= 0; r-- {
		s := a[r][stepTerms]
		for k := r + 1; k < stepTerms; k++ {
			s -= a[r][k] * x[k]
		}
		x[r] = s / a[r][r]
	}
	return x, true
}

// StepGuess is the fit's projection for one decision.
type StepGuess struct {
	OK      bool    // gap is the fit's
	PlainOK bool    // and so is plain
	Plain   float64 // seconds: a step decoding the batch alone
	Gap     float64 // seconds: the same with the chunk beside it
	Reports uint64
	Chunk   int
	Batch   int
}

func (g StepGuess) String() string {
	plain := fmt.Sprintf("plain %.2fms", g.Plain*1e3)
	if !g.PlainOK {
		plain = "plain not told apart (every step held a chunk of about the same size)"
	}
	return fmt.Sprintf("fitted to the engine's last %d steps: %s, with a %d-token chunk %.2fms, at batch %d",
		min(g.Reports, stepFitWindow), plain, g.Chunk, g.Gap*1e3, g.Batch)
}

// Project is the plain step at batch sequences decoding with kvUsage of the
// pool in use, and the step with a chunk of chunk prompt tokens after ctx
// computed beside them. Not ok before the window holds stepFitSpread steps
// with a chunk. The plain step needs the window to show plain steps too, or
// chunks of different sizes (then it is the line's value at none); a worker
// that prefills without pause runs every step full, and its fit tells only
// what a full step costs: the plain step is then not projected, and a
// smaller chunk than the window saw is taken as the smallest it saw.
func (f *StepFit) Project(batch, chunk, ctx int, kvUsage float64) StepGuess {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.solveLocked()
	g := StepGuess{Reports: f.total, Chunk: chunk, Batch: batch}
	if !f.solved || f.prefillN < stepFitSpread {
		return g
	}
	at := func(r [stepTerms]float64) float64 {
		s := 0.0
		for i := range r {
			s += f.coef[i] * r[i]
		}
		return s
	}
	g.Plain = at(stepRow(batch, 0, 0, kvUsage))
	g.PlainOK = g.Plain > 0 && (f.plainN >= stepFitSpread || f.maxPrefill-f.minPrefill >= f.maxPrefill/4)
	if !g.PlainOK && chunk < f.minPrefill {
		ctx, chunk = max(ctx-(f.minPrefill-chunk), 0), f.minPrefill
	}
	g.Gap = at(stepRow(batch, chunk, engine.ChunkPairs(ctx, chunk), kvUsage))
	if g.PlainOK {
		g.Gap = max(g.Gap, g.Plain)
	}
	g.OK = g.Gap > 0
	return g
}
