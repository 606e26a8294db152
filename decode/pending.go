package decode

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// pendingPrefills counts, per prefill worker, the prompt tokens this worker has
// asked it to prefill and not yet seen a header for: work it knows is queued or
// computing there. The router's queued_tokens for a prefill worker comes from its
// last load report, up to a heartbeat old, so a burst from this worker is not in
// it yet: without this count a short prompt sent remote right after a long one
// would be judged as meeting an empty queue, and wait behind the long one. The
// count feeds the queue the policy weighs; it does not reorder the router's
// ranking of prefill workers, which is the only one.
type pendingPrefills struct {
	mu     sync.Mutex
	tokens map[string]int
	gauge  *prometheus.GaugeVec // may be nil
}

func (p *pendingPrefills) publish(workerID string) {
	if p.gauge == nil {
		return
	}
	if n, ok := p.tokens[workerID]; ok {
		p.gauge.WithLabelValues(workerID).Set(float64(n))
	} else {
		p.gauge.DeleteLabelValues(workerID) // no series left behind for departed workers
	}
}

// add counts tokens for workerID until the returned func is called (once or more).
func (p *pendingPrefills) add(workerID string, tokens int) (done func()) {
	p.mu.Lock()
	if p.tokens == nil {
		p.tokens = map[string]int{}
	}
	p.tokens[workerID] += tokens
	p.publish(workerID)
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.tokens[workerID] -= tokens; p.tokens[workerID] <= 0 {
				delete(p.tokens, workerID)
			}
			p.publish(workerID)
		})
	}
}

// of is the tokens pending at workerID.
func (p *pendingPrefills) of(workerID string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tokens[workerID]
}
