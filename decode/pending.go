package decode

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
)

// pendingPrefills counts, per prefill worker, the prompt tokens this worker has
// asked it to prefill and not yet seen a header for: work it knows is queued or
// computing there. The router's queued_tokens for a prefill worker comes from its
// last load report, up to a heartbeat old, so a burst from this worker is not in
// it yet: without this count a short prompt sent remote right after a long one
// would be judged as meeting an empty queue, and wait behind the long one.
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

// rerank puts first the candidate that is cheapest once the tokens this worker
// has pending there, beyond what the router last heard, are counted in its queue.
// The router ranked the candidates on the same terms, so the order changes only
// when this worker knows of queued work the router has not heard of yet: a burst
// of long prompts from here would otherwise all queue on the router's favourite
// while another prefill worker sits idle. The router's own weights are used (a
// candidate carries its cost and what a queued token adds to it): with
// queue_weight 0, cache affinity alone, the router's order stands. Only a
// candidate that discovery knows (known reports true for it) is moved ahead.
// moved names the worker displaced, or is "".
func (p *pendingPrefills) rerank(cands []*decodev1.PrefillCandidate, prompt, blockSize int,
	known func(string) bool) (out []*decodev1.PrefillCandidate, moved string) {
	if len(cands) < 2 {
		return cands, ""
	}
	// Ranked by the router, a candidate's cost is the router's plus what the tokens
	// pending here beyond its report add on the router's terms (its queue weight);
	// unranked (the router suggested none), uncached plus queued tokens.
	ranked := false
	for _, c := range cands {
		ranked = ranked || c.GetCost() != 0 || c.GetQueueCostPerToken() != 0
	}
	p.mu.Lock()
	ahead := false
	work := make([]float64, len(cands))
	for i, c := range cands {
		pending := p.tokens[c.GetWorkerId()]
		unseen := max(pending-int(c.GetQueuedTokens()), 0)
		ahead = ahead || unseen > 0
		if ranked {
			work[i] = c.GetCost() + c.GetQueueCostPerToken()*float64(unseen)
		} else {
			work[i] = float64(max(prompt-int(c.GetCachedBlocks())*blockSize, 0) + int(c.GetQueuedTokens()) + unseen)
		}
	}
	p.mu.Unlock()
	if !ahead {
		return cands, ""
	}
	best := 0
	for i := range work {
		if work[i] < work[best] && known(cands[i].GetWorkerId()) {
			best = i
		}
	}
	if best == 0 {
		return cands, ""
	}
	out = make([]*decodev1.PrefillCandidate, 0, len(cands))
	out = append(out, cands[best])
	out = append(out, cands[:best]...)
	out = append(out, cands[best+1:]...)
	return out, cands[0].GetWorkerId()
}
