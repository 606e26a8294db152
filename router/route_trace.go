package router

import (
	"fmt"

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
