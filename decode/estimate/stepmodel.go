package estimate

import (
	"math"
	"math/bits"
	"slices"
	"sync"
)

// A plain engine step (decoding the batch, no prompt beside it) costs more the
// more sequences it decodes: each reads its own KV and adds a row to every
// matrix product. The local prefill line (Estimator.local) charges one fixed
// cost per step whatever the batch, fitted at whatever batches the local
// prefills happened to meet, and the slo policy goes local mostly while the
// batch is small: at a large batch it would take the step for a small one's and
// let prefills go local that stretch the batch past its TBT. stepModel
// learns the step at each batch size from the gaps the worker's own streams
// see.
//
// Per bucket of batch sizes (powers of two), the last StepWindow gaps, and the
// median of them: a gap stretched by a prefill chunk is an outlier the median
// ignores while fewer than half the steps carry one, where a least-squares
// line would be dragged by it. Between buckets the step is interpolated
// linearly in the batch, past the last one extrapolated with the slope of the
// last two (never falling). KV in use is not a dimension: it grows with the
// batch, and a second dimension would leave most cells empty on real traffic.
const (
	stepBuckets = 16 // batch 1 to 2^15 and beyond
	StepWindow  = 32 // gaps per bucket
	stepWarm    = 8  // gaps a bucket needs before its median counts
)

type stepBucket struct {
	gap, batch [StepWindow]float64
	next, n    int
}

// StepModel is the plain step time against the decode batch.
type StepModel struct {
	mu sync.Mutex
	b  [stepBuckets]stepBucket
}

func stepBucketOf(batch int) int { return min(bits.Len(uint(batch))-1, stepBuckets-1) }

// Observe records a gap of seconds between two tokens of a stream while batch
// streams were live here.
func (m *StepModel) Observe(batch int, seconds float64) {
	if batch <= 0 || !(seconds > 0) || math.IsInf(seconds, 0) {
		return
	}
	m.mu.Lock()
	b := &m.b[stepBucketOf(batch)]
	b.gap[b.next], b.batch[b.next] = seconds, float64(batch)
	b.next = (b.next + 1) % StepWindow
	b.n = min(b.n+1, StepWindow)
	m.mu.Unlock()
}

// point is a warm bucket's median gap at its mean batch; under m.mu.
func (m *StepModel) point(i int) (x, y float64, ok bool) {
	b := &m.b[i]
	if b.n < stepWarm {
		return 0, 0, false
	}
	var g [StepWindow]float64
	copy(g[:], b.gap[:b.n])
	slices.Sort(g[:b.n])
	for _, v := range b.batch[:b.n] {
		x += v
	}
	y = g[b.n/2]
	if b.n%2 == 0 {
		y = (g[b.n/2-1] + g[b.n/2]) / 2
	}
	return x / float64(b.n), y, true
}

// StepAt is the plain step the projection takes for a batch.
type StepAt struct {
	Seconds float64
	Batch   int
	// Learned: Seconds comes from the model; else the model is cold for this
	// batch and the caller keeps its own figure.
	Learned bool
	// From says how: a bucket's own median, or between (beyond) two.
	From string
}

// At is the plain step at batch: between the warm buckets nearest below and
// above it, interpolated; beyond the last two on either side, extrapolated
// along them; one warm bucket alone only for a batch of its own. Cold
// otherwise: one bucket far from the batch says nothing of the slope. Three
// medians of 32 at most: it runs at every decision.
func (m *StepModel) At(batch int) StepAt {
	out := StepAt{Batch: batch}
	if batch <= 0 {
		return out
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	type pt struct{ x, y float64 }
	own := stepBucketOf(batch)
	var below, above [2]pt // nearest first
	nb, na := 0, 0
	for i := own; i >= 0 && nb < 2; i-- {
		if x, y, ok := m.point(i); ok {
			below[nb] = pt{x, y}
			nb++
		}
	}
	for i := own + 1; i < stepBuckets && na < 2 && nb+na < 3; i++ {
		if x, y, ok := m.point(i); ok {
			above[na] = pt{x, y}
			na++
		}
	}
	b := float64(batch)
	line := func(p, q pt) float64 { // through p and q (p.x < q.x), never falling
		if q.x <= p.x {
			return max(p.y, q.y)
		}
		return p.y + max(0, (q.y-p.y)/(q.x-p.x))*(b-p.x)
	}
	switch {
	case nb > 0 && na > 0 && b > below[0].x:
		out.Seconds, out.From = line(below[0], above[0]), "interpolated"
	case nb > 1:
		// At or below the nearest warm mean with another below it, or past the
		// last warm bucket: along the two, never below the nearest.
		out.Seconds, out.From = line(below[1], below[0]), "interpolated"
		if b > below[0].x {
			out.Seconds, out.From = max(below[0].y, out.Seconds), "extrapolated"
		}
	case nb == 1 && (na > 0 || stepBucketOf(int(below[0].x+0.5)) == own):
		out.Seconds, out.From = below[0].y, "bucket"
	case nb == 0 && na > 1:
		// Smaller than every warm bucket: along the two nearest, down.
		out.Seconds, out.From = line(above[0], above[1]), "extrapolated"
	default:
		return out
	}
	out.Learned = out.Seconds > 0
	return out
}
