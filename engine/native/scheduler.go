package native

import (
	"runtime"
	"slices"
	"time"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/kvcache/blockhash"
)

// sched is the scheduler goroutine's state. running holds admitted sequences (they
// hold blocks), waiting those to (re)prefill; both are kept in arrival order, which
// is the priority: the newest sequence is preempted first and the oldest waiting
// one admitted first.
type sched struct {
	e       *Engine
	ws      *workspace
	smp     sampler
	running []*sequence
	waiting []*sequence
	// The plan of the step being built.
	planSeqs []*sequence
	planN    []int
}

func (e *Engine) loop() {
	defer close(e.done)
	sc := &sched{e: e, ws: e.model.newWorkspace(e.cfg.MaxBatchTokens, 1)}
	idle := time.NewTimer(time.Hour)
	for {
		e.mu.Lock()
		in, cancels, closed := e.incoming, e.cancels, e.closed
		e.incoming, e.cancels = nil, nil
		e.mu.Unlock()
		for _, s := range in {
			sc.arrive(s)
		}
		if closed {
			sc.shutdown()
			return
		}
		for _, c := range cancels {
			sc.cancel(c)
		}
		progressed := len(sc.running)+len(sc.waiting) > 0 && sc.step()
		sc.publish()
		if progressed {
			// Let the streams send what this step produced before the next step: on
			// a worker with one P the loop would otherwise hold it until Go
			// preempts it, and tokens would reach clients in bursts.
			runtime.Gosched()
			continue
		}
		if len(sc.running)+len(sc.waiting) == 0 {
			<-e.wake
			continue
		}
		// Blocked on blocks held outside the scheduler (exports, imports): their
		// release nudges us, and a slow poll covers anything that does not.
		idle.Reset(10 * time.Millisecond)
		select {
		case <-e.wake:
		case <-idle.C:
		}
	}
}

func (sc *sched) arrive(s *sequence) {
	if s.kind == kindImport {
		s.state = stateRunning
		sc.running = insertByArrival(sc.running, s)
		return
	}
	s.state = stateWaiting
	sc.waiting = insertByArrival(sc.waiting, s)
}

func insertByArrival(list []*sequence, s *sequence) []*sequence {
	i, _ := slices.BinarySearchFunc(list, s.arrival, func(x *sequence, a uint64) int {
		return int(int64(x.arrival - a))
	})
	return slices.Insert(list, i, s)
}

func (sc *sched) cancel(c cancelReq) {
	s := c.seq
	if s.state == stateDone || s.state == stateNew {
		return
	}
	sc.finish(s, engine.FinishCancelled, c.err)
}

// finish ends s: its blocks go back to the pool (full ones stay cached) and its
// stream ends.
func (sc *sched) finish(s *sequence, f engine.FinishReason, err error) {
	sc.running = slices.DeleteFunc(sc.running, func(x *sequence) bool { return x == s })
	sc.waiting = slices.DeleteFunc(sc.waiting, func(x *sequence) bool { return x == s })
	sc.e.pool.Release(s.blocks)
	s.blocks = nil
	s.state = stateDone
	s.doneAt = time.Now()
	s.out.end(f, err)
	if s.stopCtx != nil {
		s.stopCtx()
	}
	close(s.released)
}

func (sc *sched) shutdown() {
	for _, s := range slices.Concat(sc.running, sc.waiting) {
		sc.finish(s, engine.FinishCancelled, engine.ErrClosed)
	}
	sc.publish()
}

func (sc *sched) publish() {
	e := sc.e
	tokens := 0
	for _, s := range sc.waiting {
		tokens += len(s.tokens) - s.computed
	}
	for _, s := range sc.running {
		if r := len(s.tokens) - s.computed; r > 1 {
			tokens += r
		}
	}
	e.running.Store(int64(len(sc.running)))
	e.waitingTokens.Store(int64(tokens))
	if n := int64(len(sc.waiting)); e.waiting.Swap(n) < n {
		e.QueueChanged() // after the store: a woken reader sees the new queue
	}
}

// preempt takes s's blocks back and queues it to recompute. Its full blocks stay in
// the prefix cache, so the recompute is often mostly a cache hit.
func (sc *sched) preempt(s *sequence) {
	sc.running = slices.DeleteFunc(sc.running, func(x *sequence) bool { return x == s })
	sc.e.pool.Release(s.blocks)
	s.blocks, s.computed, s.stored = nil, 0, 0
	s.state = stateWaiting
	sc.waiting = insertByArrival(sc.waiting, s)
	sc.e.preemptions.Add(1)
	sc.e.log.Debug("preempted", "request_id", s.req.ID, "tokens", len(s.tokens))
}

// reserve grows s's block table to cover up to n more tokens and returns how many it
// could cover (0 if the pool has no block to give).
func (sc *sched) reserve(s *sequence, n int) int {
	bs := sc.e.cfg.BlockSize
	need := (s.computed+n+bs-1)/bs - len(s.blocks)
	if need <= 0 {
		return n
	}
	if avail := sc.e.pool.Available(); avail < need {
		need = avail
		n = (len(s.blocks)+need)*bs - s.computed
		if n <= 0 {
			return 0
		}
	}
	blocks, ok := sc.e.pool.Allocate(s.blocks, need)
	if !ok {
		return 0
	}
	s.blocks = blocks
	return n
}

func (sc *sched) plan(s *sequence, n int) {
	sc.planSeqs = append(sc.planSeqs, s)
	sc.planN = append(sc.planN, n)
}

// step builds one batch (a token for every decoding sequence, then prefill chunks in
// the budget left), runs it, and reports whether anything ran.
func (sc *sched) step() bool {
	e := sc.e
	sc.planSeqs, sc.planN = sc.planSeqs[:0], sc.planN[:0]
	budget := e.cfg.MaxBatchTokens
	decodes := 0
	// Decodes first: they are what inter-token latency is made of.
	for i := 0; i < len(sc.running) && budget > 0; {
		s := sc.running[i]
		if len(s.tokens)-s.computed != 1 {
			i++
			continue
		}
		ok := true
		for ok && sc.reserve(s, 1) == 0 {
			victim := sc.running[len(sc.running)-1]
			if victim == s {
				// s is the newest: it yields, unless it is alone, when it waits for
				// exports or imports to let go of blocks.
				if len(sc.running) > 1 {
					sc.preempt(s)
				}
				ok = false
				break
			}
			sc.preempt(victim)
		}
		if ok {
			sc.plan(s, 1)
			budget--
			decodes++
		}
		i++
	}
	if int64(decodes) > e.maxDecodeBatch.Load() {
		e.maxDecodeBatch.Store(int64(decodes)) // only this goroutine writes it
	}
	// Chunked prefill of admitted sequences, then admission of waiting ones.
	for _, s := range sc.running {
		if budget == 0 {
			break
		}
		if r := len(s.tokens) - s.computed; r > 1 {
			n := sc.reserve(s, min(budget, r))
			if n == 0 {
				break
			}
			sc.plan(s, n)
			budget -= n
		}
	}
	for len(sc.waiting) > 0 && budget > 0 && len(sc.running) < e.cfg.MaxRunning {
		s := sc.waiting[0]
		sc.admit(s)
		n := sc.reserve(s, min(budget, len(s.tokens)-s.computed))
		if n == 0 {
			e.pool.Release(s.blocks)
			s.blocks, s.computed, s.stored = nil, 0, 0
			break
		}
		sc.waiting = sc.waiting[1:]
		s.state = stateRunning
		if s.startedAt.IsZero() {
			s.startedAt = time.Now()
		}
		sc.running = insertByArrival(sc.running, s)
		sc.plan(s, n)
		budget -= n
	}
	if len(sc.planSeqs) == 0 {
		sc.unstick()
		return false
	}
	sc.run(decodes)
	return true
}

// admit pins the longest cached prefix of s (leaving at least its last token to
// compute, since sampling needs its logits).
func (sc *sched) admit(s *sequence) {
	bs := sc.e.cfg.BlockSize
	usable := (len(s.tokens) - 1) / bs
	if s.wantsPromptLogprobs() {
		usable = 0 // a cached position would have no logits, so no logprob
	}
	s.ensureHashes(usable, bs)
	s.blocks = sc.e.pool.Acquire(s.blocks[:0], s.hashes[:usable])
	s.computed = len(s.blocks) * bs
	s.stored = len(s.blocks)
	if !s.admitted {
		s.admitted = true
		s.out.setCached(s.computed)
		sc.e.prefixQueries.Add(uint64(len(s.tokens)))
		sc.e.prefixHits.Add(uint64(s.computed))
	}
}

// unstick handles a step that could plan nothing while sequences are admitted: each
// holds part of the pool and needs more. Preempting the newest lets the others go
// on; a sequence alone that cannot fit even in an otherwise idle pool is ended.
func (sc *sched) unstick() {
	if len(sc.running) > 1 {
		sc.preempt(sc.running[len(sc.running)-1])
		return
	}
	if len(sc.running) == 1 {
		s := sc.running[0]
		if ps := sc.e.pool.Stats(); ps.Active == len(s.blocks) && ps.Free+ps.Cached == 0 {
			sc.e.log.Warn("sequence outgrew the KV pool", "request_id", s.req.ID, "tokens", len(s.tokens))
			sc.finish(s, engine.FinishLength, nil)
		}
	}
}

func (s *sequence) ensureHashes(fullBlocks, bs int) {
	if have := len(s.hashes); have < fullBlocks {
		var parent uint64
		if have > 0 {
			parent = s.hashes[have-1]
		}
		s.hashes = blockhash.Append(s.hashes, parent, s.tokens[have*bs:fullBlocks*bs], bs)
	}
}

// storeFull offers s's newly filled blocks to the prefix cache.
func (sc *sched) storeFull(s *sequence) {
	bs := sc.e.cfg.BlockSize
	full := min(s.computed/bs, len(s.blocks))
	if full <= s.stored {
		return
	}
	s.ensureHashes(full, bs)
	var parent uint64
	if s.stored > 0 {
		parent = s.hashes[s.stored-1]
	}
	sc.e.pool.Store(parent, s.blocks[s.stored:full], s.hashes[s.stored:full])
	s.stored = full
}

// run executes the planned batch, whose first decodes entries are decode
// tokens and the rest prompt chunks, and hands out the sampled tokens.
func (sc *sched) run(decodes int) {
	began := time.Now()
	var tokens []uint32
	segs := make([]segment, len(sc.planSeqs))
	nLogits := 0
	for i, s := range sc.planSeqs {
		n := sc.planN[i]
		segs[i] = segment{
			blocks: s.blocks,
			pos0:   s.computed,
			n:      n,
			row0:   len(tokens),
			logits: s.computed+n == len(s.tokens),
		}
		if segs[i].logits {
			nLogits++
		}
		if s.wantsPromptLogprobs() && s.computed < s.promptLen-1 {
			segs[i].rows = min(n, s.promptLen-1-s.computed)
			segs[i].onRow = sc.promptRow(s, s.computed)
			nLogits = max(nLogits, promptRowsPerPass)
		}
		tokens = append(tokens, s.tokens[s.computed:s.computed+n]...)
	}
	sc.ws.growLogits(nLogits, sc.e.mc.DModel, sc.e.model.vocabPad)
	logits := sc.e.model.forward(sc.ws, tokens, segs)
	li := 0
	var ok bool
	for i, s := range sc.planSeqs {
		s.computed += sc.planN[i]
		sc.storeFull(s)
		if !segs[i].logits {
			continue
		}
		if s.wantsPromptLogprobs() {
			// Handed out before the first token, which the reader waits for.
			s.promptDone = true
			s.out.setPromptLogprobs(s.promptLPs)
		}
		row := logits[li][:sc.e.mc.VocabSize]
		sp := s.req.Sampling
		if sp.Penalized() {
			penalize(row, sp, s.tokens, s.promptLen, sc.smp.counts())
		}
		drawFrom := row
		if sp.MinP > 0 && sp.MinP <= 1 && sp.Temperature > 0 {
			drawFrom = minPCut(row, sc.smp.scratch(len(row)), sp.MinP, sp.Temperature)
		}
		li++
		var tok uint32
		if sp.Constraint == nil {
			tok = sc.smp.sample(drawFrom, sc.e.mc.VocabSize, sp, s.outputs())
		} else if tok, ok = sc.constrainedTok(s, drawFrom, sp); !ok {
			continue
		}
		// Log-probabilities are of the model's distribution, before the mask, as
		// vLLM reports them by default: they say how far the constraint pulled the model.
		var lp *engine.TokenLogprobs
		if s.req.Logprobs {
			lp = logprobsOf(row, tok, s.req.TopLogprobs)
		}
		sc.deliver(s, tok, lp)
		if s.matcher != nil && s.state != stateDone && s.kind != kindPrefill && s.matcher.Final() {
			sc.finish(s, engine.FinishStop, nil) // nothing may follow the text but a stop token
		}
	}
	if sc.e.StepsObserved() {
		r := engine.StepReport{Seconds: time.Since(began).Seconds(), Decode: decodes}
		for _, sg := range segs[decodes:] {
			r.PrefillTokens += sg.n
			r.PrefillPairs += engine.ChunkPairs(sg.pos0, sg.n)
		}
		if ps := sc.e.pool.Stats(); ps.Total > 0 {
			r.KVUsage = float64(ps.Active) / float64(ps.Total)
		}
		sc.e.Step(r)
	}
}

// promptRowsPerPass is how many prompt positions' logits are computed at once for
// a request's prompt logprobs: a bounded buffer, not one row per position.
const promptRowsPerPass = 8

// promptRow records the logprob of the prompt token after position pos0+r from
// that position's logits.
func (sc *sched) promptRow(s *sequence, pos0 int) func(r int, logits []float32) {
	return func(r int, logits []float32) {
		pos := pos0 + r
		s.promptLPs[pos] = *logprobsOf(logits, s.tokens[pos+1], s.req.TopLogprobs)
	}
}

// constrainedTok draws s's next token under its constraint and reads it into the
// matcher. ok is false when s has ended instead: its text is final (finish stop),
// no token is allowed, or its earlier tokens do not fit.
func (sc *sched) constrainedTok(s *sequence, logits []float32, sp engine.Sampling) (tok uint32, ok bool) {
	m, err := sc.e.matcher(s)
	if err != nil {
		sc.finish(s, engine.FinishNone, err)
		return 0, false
	}
	if m.Final() {
		sc.finish(s, engine.FinishStop, nil)
		return 0, false
	}
	if tok, ok = sc.drawConstrained(s, m, logits, sp); !ok {
		sc.e.log.Warn("native: the constraint allows no token of the vocabulary; the sequence ends", "request_id", s.req.ID)
		sc.finish(s, engine.FinishStop, nil)
		return 0, false
	}
	if !s.isStop(tok) {
		m.Advance(tok)
		s.fed++
	}
	return tok, true
}

// deliver acts on a freshly drawn token.
func (sc *sched) deliver(s *sequence, tok uint32, lp *engine.TokenLogprobs) {
	if s.kind == kindPrefill {
		s.tokens = append(s.tokens, tok)
		sc.handOver(s, tok, lp)
		return
	}
	if s.isStop(tok) {
		sc.finish(s, engine.FinishStop, nil)
		return
	}
	s.tokens = append(s.tokens, tok)
	s.out.emit(tok, lp)
	if sc.e.outOfRoom(s) {
		sc.finish(s, engine.FinishLength, nil)
	}
}

// outOfRoom reports whether s may draw no more: max tokens reached, or the newest
// token would sit past the end of the context.
func (e *Engine) outOfRoom(s *sequence) bool {
	if s.req.MaxTokens > 0 && s.outputs() >= s.req.MaxTokens {
		return true
	}
	return len(s.tokens) > e.mc.ContextLength
}

// handOver turns a finished prefill into an Export that owns the blocks.
func (sc *sched) handOver(s *sequence, first uint32, lp *engine.TokenLogprobs) {
	sc.running = slices.DeleteFunc(sc.running, func(x *sequence) bool { return x == s })
	s.doneAt = time.Now()
	s.export = &export{
		e:       sc.e,
		first:   first,
		firstLP: lp,
		blocks:  s.blocks,
		cached:  s.out.usage.CachedTokens / sc.e.cfg.BlockSize,
		queue:   s.startedAt.Sub(s.queuedAt),
		prefill: s.doneAt.Sub(s.startedAt),
	}
	s.blocks = nil
	s.state = stateDone
	if s.stopCtx != nil {
		s.stopCtx()
	}
	close(s.released)
}

func (ws *workspace) growLogits(rows, d, vocabPad int) {
	if len(ws.logits) < rows*vocabPad {
		ws.logits = make([]float32, rows*vocabPad)
		ws.hl = make([]float32, rows*d)
	}
}
