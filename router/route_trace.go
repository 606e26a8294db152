package router

import (
	"cmp"
	"fmt"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
)

// traceDecision puts a decision on its span: the decode worker picked, its cost
// and cached blocks, how many candidates it was the least cost among, and each
// ranked prefill worker with its cost, so that a trace says why this worker.
func traceDecision(span trace.Span, resp *routerv1.RouteResponse, cost float64, scored int, class string, effective int) {
	prefill := make([]string, 0, len(resp.GetPrefillWorkers()))
	for _, p := range resp.GetPrefillWorkers() {
		prefill = append(prefill, fmt.Sprintf("%s cost=%.3g cached_blocks=%d queued_tokens=%d",
			p.GetWorker().GetId(), p.GetCost(), p.GetCachedBlocks(), p.GetQueuedTokens()))
	}
	span.SetAttributes(
		attribute.String("tandem.route.decode_worker", resp.GetDecodeWorker().GetId()),
		attribute.Float64("tandem.route.decode_cost", cost),
		attribute.Int("tandem.route.decode_cached_blocks", int(resp.GetDecodeCachedBlocks())),
		attribute.Int("tandem.route.scored_candidates", scored),
		attribute.String("tandem.route.class", class),
		attribute.Int("tandem.route.effective_tokens", effective),
		attribute.String("tandem.route.reason", resp.GetReason()),
		attribute.StringSlice("tandem.route.prefill_candidates", prefill),
	)
}

// maxTracedCandidates bounds the decode candidates a decision's span lists: the
// best are those that explain the pick, and a span must not grow with the fleet.
const maxTracedCandidates = 16

// traceCandidates lists on the decision's span the decode candidates scored (those
// with the need flags), least cost first, at most maxTracedCandidates of them,
// each with its cost and cached blocks, and how many were left off.
func traceCandidates(span trace.Span, decoders []candidate, need candFlags) {
	scored := make([]candidate, 0, len(decoders))
	for _, c := range decoders {
		if c.flags&need == need {
			scored = append(scored, c)
		}
	}
	slices.SortStableFunc(scored, func(a, b candidate) int { return cmp.Compare(a.cost, b.cost) })
	shown := scored[:min(len(scored), maxTracedCandidates)]
	list := make([]string, len(shown))
	for i, c := range shown {
		list[i] = fmt.Sprintf("%s cost=%.3g cached_blocks=%d", c.st.w.ID, c.cost, c.cached)
	}
	span.SetAttributes(attribute.StringSlice("tandem.route.decode_candidates", list),
		attribute.Int("tandem.route.decode_candidates_left_off", len(scored)-len(shown)))
}
