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

// rerank puts first the candidate that would finish this prompt soonest by this
// worker's own count: its uncached prompt tokens plus the larger of its reported
// queue and the tokens pending there from here. The router ranked the candidates
// on the same terms (with its default weights), so the order changes only when
// this worker knows of queued work the router has not heard of yet: a burst of
// long prompts from here would otherwise all queue on the router's favourite while
// another prefill worker sits idle. The terms have unit weights, the router's
// defaults: with other prefill_weight/queue_weight the order this worker picks
// can differ from the router's in more cases than pending work. Only a candidate
// known reports true for (one discovery knows) is moved ahead. moved names the
// worker displaced, or is "".
func (p *pendingPrefills) rerank(cands []*decodev1.PrefillCandidate, prompt, blockSize int, known func(string) bool) (out []*decodev1.PrefillCandidate, moved string) {
	if len(cands) < 2 {
		return cands, ""
	}
	p.mu.Lock()
	ahead := false
	work := make([]int, len(cands))
	for i, c := range cands {
		pending := p.tokens[c.GetWorkerId()]
		ahead = ahead || pending > int(c.GetQueuedTokens())
		work[i] = max(prompt-int(c.GetCachedBlocks())*blockSize, 0) + max(int(c.GetQueuedTokens()), pending)
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
