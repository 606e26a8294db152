package router

import "math"

// adaptCosts are the two classes' costs as the adaptive threshold weighs them.
//
// The local class's best worker would prefill the prompt beside the sequences it
// decodes, each of which waits as long as the prefill takes: stalled is its
// running sequences x the prompt's uncached blocks there (the least among the
// workers tied at bestLocal), priced like prefill blocks and weighted by
// ISLITLWeight. Without that term the comparison sees only the local worker's
// active blocks, always fewer than those of the decode workers holding long
// contexts, so the threshold could only rise.
//
// The disaggregated class's prompts wait in a prefill worker's queue: the least
// queue term among the prefill workers is added (nothing without prefill
// workers, when its workers prefill locally).
func adaptCosts(p Params, bestLocal, stalled, bestDisagg, prefillQueue float64) (local, disagg float64) {
	local = bestLocal + p.ISLITLWeight*p.PrefillWeight*stalled
	disagg = bestDisagg
	if !math.IsInf(prefillQueue, 1) {
		disagg += prefillQueue
	}
	return local, disagg
}

// adapt moves the threshold when the class on the other side keeps offering a
// clearly cheaper worker: consecutive agreeing requests (hysteresis) move it one
// step, within [ISLMin, ISLMax]. A request sent to the local class when the
// disaggregated one was cheaper lowers it; one sent to the disaggregated class
// when the local one was cheaper raises it.
func (r *Router) adapt(p Params, reqID string, effective int, local, disagg float64) {
	if !p.ISLGate || !p.ISLAdaptive {
		return
	}
	if math.IsInf(local, 1) || math.IsInf(disagg, 1) {
		return
	}
	signal := 0
	switch {
	case effective < r.threshold && local-disagg > p.ISLMargin:
		signal = -1 // sent local, but disaggregated workers were clearly cheaper
	case effective >= r.threshold && disagg-local > p.ISLMargin:
		signal = +1 // sent disaggregated, but local workers were clearly cheaper
	}
	switch {
	case signal == 0:
		return
	case signal*r.evidence < 0:
		r.evidence = signal
	default:
		r.evidence += signal
	}
	if abs(r.evidence) < p.ISLHysteresis {
		return
	}
	from := r.threshold
	r.threshold = min(max(r.threshold+signal*p.ISLStep, p.ISLMin), p.ISLMax)
	r.evidence = 0
	if r.threshold == from {
		return // at its bound: no move
	}
	r.metrics.threshold.Set(float64(r.threshold))
	dir := 0
	if signal < 0 {
		dir = 1
	}
	r.metrics.adaptMoves[dir].Inc()
	r.log.Info("router: ISL threshold moved", "request_id", reqID, "from", from, "to", r.threshold,
		"effective", effective, "local_cost", local, "disagg_cost", disagg)
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
