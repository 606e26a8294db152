package workersvc

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/kvevents"
	"github.com/tandem-serve/tandem/engine/openaihttp"
)

// registerPoolMetrics exposes the engine's KV pool and queue, read at scrape time,
// with the nouns vLLM's dashboards use (running, waiting, KV cache usage).
func registerPoolMetrics(reg prometheus.Registerer, eng engine.Engine) {
	cached := func() float64 { return float64(eng.Stats().CachedBlocks) }
	switch e := eng.(type) {
	case *withEvents:
		// A GPU engine server reports no cached blocks; its KV events say
		// which prefix blocks it holds (in use or not).
		cached = func() float64 { return float64(e.mirror.Len()) }
		if e.mirror == nil {
			cached = nil // recorded, without events
		}
	case *openaihttp.Engine:
		cached = nil // no events: unknown, which is not 0
	}
	for _, state := range []string{"free", "cached", "active"} {
		if state == "cached" && cached == nil {
			continue
		}
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tandem_kv_cache_blocks",
			Help: "KV cache blocks by state: free, cached (reusable prefix, evictable; for a GPU engine server, the prefix blocks " +
				"its KV events say it holds, in use or not), active (held by sequences).",
			ConstLabels: prometheus.Labels{"state": state},
		}, func() float64 {
			switch state {
			case "free":
				return float64(eng.Stats().FreeBlocks)
			case "cached":
				return cached()
			}
			return float64(eng.Stats().ActiveBlocks)
		}))
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tandem_kv_cache_usage_ratio", Help: "Fraction of KV cache blocks held by sequences.",
		}, func() float64 {
			st := eng.Stats()
			if st.TotalBlocks == 0 {
				return 0
			}
			return float64(st.ActiveBlocks) / float64(st.TotalBlocks)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tandem_num_requests_running", Help: "Sequences being decoded (or prefilled) now.",
		}, func() float64 { return float64(eng.Stats().Running) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tandem_num_requests_waiting", Help: "Sequences waiting for blocks or their turn.",
		}, func() float64 { return float64(eng.Stats().Waiting) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tandem_prefix_cache_queries_total",
			Help: "Prompt tokens looked up in the engine's prefix cache (admitted requests and KV imports), as vLLM's prefix_cache_queries.",
		}, func() float64 { return float64(eng.Stats().PrefixQueryTokens) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tandem_prefix_cache_hits_total",
			Help: "Prompt tokens found in the engine's prefix cache, as vLLM's prefix_cache_hits; over the queries, the hit rate.",
		}, func() float64 { return float64(eng.Stats().PrefixHitTokens) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tandem_constrained_draws_total",
			Help: "Tokens the native engine drew under a constraint (response_format, enforced tool calls).",
		}, func() float64 { return float64(eng.Stats().ConstrainedDraws) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tandem_constrained_masked_draws_total",
			Help: "Constrained draws whose unconstrained pick the constraint refused, so the whole token mask was applied and the token drawn again.",
		}, func() float64 { return float64(eng.Stats().MaskedDraws) }),
	)
}

// registerEventMetrics counts what the subscriber to a GPU engine's KV events
// saw, so an operator can tell a router's stale view from a quiet engine: gaps
// and resyncs mean the index was rebuilt, bad messages a publisher tandem cannot
// read, skipped events blocks the router never hears of.
func registerEventMetrics(reg prometheus.Registerer, eng engine.Engine) {
	w, ok := eng.(*withEvents)
	if !ok || w.sub == nil {
		return
	}
	counter := func(name, help string, labels prometheus.Labels, get func(kvevents.SubscriberStats) int) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return float64(get(w.sub.Stats())) })
	}
	reg.MustRegister(
		counter("tandem_kv_events_batches_total", "Engine KV event batches applied to the worker's view of its cache, live or replayed.",
			prometheus.Labels{"source": "live"}, func(s kvevents.SubscriberStats) int { return s.Batches - s.Replayed }),
		counter("tandem_kv_events_batches_total", "Engine KV event batches applied to the worker's view of its cache, live or replayed.",
			prometheus.Labels{"source": "replayed"}, func(s kvevents.SubscriberStats) int { return s.Replayed }),
		counter("tandem_kv_events_gaps_total", "Gaps in the engine's KV event sequence numbers.", nil,
			func(s kvevents.SubscriberStats) int { return s.Gaps }),
		counter("tandem_kv_events_bad_messages_total", "Messages from the KV event publisher that were not (topic, sequence, batch).", nil,
			func(s kvevents.SubscriberStats) int { return s.Bad }),
	)
	for _, reason := range kvevents.ResyncReasons {
		reg.MustRegister(counter("tandem_kv_events_resyncs_total",
			"Times the worker's view of the engine's cache was cleared, by reason: gap (lost batches not replayed), undecodable (a batch), "+
				"restart (the sequence started over), disconnected (the subscription was lost).",
			prometheus.Labels{"reason": reason}, func(s kvevents.SubscriberStats) int { return s.Resyncs[reason] }))
	}
	for _, reason := range kvevents.SkipReasons {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tandem_kv_events_skipped_total",
			Help: "Engine KV events the worker could not key, by reason (no_blocks, block_size, token_count, lora, medium, unknown_parent): " +
				"blocks the router never hears of.",
			ConstLabels: prometheus.Labels{"reason": reason},
		}, func() float64 { return float64(w.mirror.Stats().Skipped[reason]) }))
	}
}

// engineServer is a GPU engine server as its metrics see it (openaihttp.Engine).
type engineServer interface {
	Healthy() (bool, string)
	Failures() map[string]uint64
}

// registerEngineMetrics says whether a GPU engine server answers its health
// checks, and counts the requests it failed by how they failed.
func registerEngineMetrics(reg prometheus.Registerer, eng engine.Engine) {
	e, ok := eng.(engineServer)
	if !ok {
		return
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tandem_engine_up", Help: "1 while the engine server answers its health checks, 0 after --engine-health-failures in a row failed.",
	}, func() float64 {
		if ok, _ := e.Healthy(); ok {
			return 1
		}
		return 0
	}))
	for _, reason := range openaihttp.FailureReasons {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tandem_engine_failures_total",
			Help: "Requests to the engine server that failed, by how: unavailable (unreachable, 503, 429), rejected (another 4xx), " +
				"protocol (an answer that is not the API), broken_stream (a stream cut or garbled), timeout_headers, timeout_first_token, timeout_token.",
			ConstLabels: prometheus.Labels{"reason": reason},
		}, func() float64 { return float64(e.Failures()[reason]) }))
	}
}
