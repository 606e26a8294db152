package router

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	routed       *prometheus.CounterVec
	otherWeights *prometheus.CounterVec
	gate         *prometheus.CounterVec
	path         [2]prometheus.Counter // by load order, by the full pass
	resyncs      *prometheus.CounterVec
	busyFallback prometheus.Counter
	rolesDropped prometheus.Counter
	adaptMoves   [2]prometheus.Counter // up, down
	events       prometheus.Counter
	threshold    prometheus.Gauge
	withheld     prometheus.Gauge
	indexBlocks  prometheus.Gauge
	cachedBlocks prometheus.Histogram
	latency      prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		routed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_router_routed_total", Help: "Requests routed, by decode worker.",
		}, []string{"worker"}),
		otherWeights: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_router_other_weights_skipped_total",
			Help: "Requests for which a worker was passed over because it serves other weights than the request's model, by worker.",
		}, []string{"worker"}),
		gate: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_router_gate_total",
			Help: "Requests by the class scored: all (gating off), local, disagg, or fallback-all when the class was empty.",
		}, []string{"class"}),
		resyncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_router_resyncs_total", Help: "Worker event streams restarted for a fresh snapshot, by reason.",
		}, []string{"reason"}),
		rolesDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_router_planner_roles_dropped_total",
			Help: "Times the planner's roles left no worker to decode a request and were dropped, every lender decoding again.",
		}),
		busyFallback: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_router_busy_fallback_total", Help: "Requests for which no scored worker had free blocks, so busy workers were scored too.",
		}),
		events: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_router_kv_events_total", Help: "KV events applied to the index.",
		}),
		threshold: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tandem_router_isl_threshold_tokens", Help: "The ISL gating threshold in force.",
		}),
		withheld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tandem_router_lenders_withheld",
			Help: "Lenders out of the decode candidates because they are prefilling for decode workers (--lenders-prefill-first).",
		}),
		indexBlocks: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tandem_router_index_blocks", Help: "(block, worker) entries in the KV index.",
		}),
		cachedBlocks: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tandem_router_chosen_cached_blocks", Help: "Prompt blocks the chosen decode worker already held.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tandem_router_route_seconds", Help: "Time to make one routing decision.",
			// Steps of sqrt(2) from 1 us to 185 ms: doubling steps could not tell a
			// p99 of 17 us from one of 31.
			Buckets: prometheus.ExponentialBuckets(1e-6, math.Sqrt2, 36),
		}),
	}
	paths := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tandem_router_decision_path_total",
		Help: "Decisions by how they were made: load_order (the prompt's holders and the least loaded others) or full_pass (every worker: temperature above 0, an explanation, workers of several models).",
	}, []string{"path"})
	m.path = [2]prometheus.Counter{paths.WithLabelValues("load_order"), paths.WithLabelValues("full_pass")}
	reg.MustRegister(paths)
	moves := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tandem_router_isl_threshold_moves_total", Help: "Moves of the adaptive ISL threshold, by direction (up: more prompts to the local class).",
	}, []string{"direction"})
	m.adaptMoves = [2]prometheus.Counter{moves.WithLabelValues("up"), moves.WithLabelValues("down")}
	reg.MustRegister(moves)
	reg.MustRegister(m.routed, m.otherWeights, m.gate, m.resyncs, m.busyFallback, m.rolesDropped, m.events, m.threshold, m.withheld, m.indexBlocks, m.cachedBlocks, m.latency)
	return m
}
