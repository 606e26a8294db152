package prefill

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests *prometheus.CounterVec
	bytes    *prometheus.CounterVec
	queue    prometheus.Histogram
	compute  prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_prefill_requests_total", Help: "Remote prefills by outcome: ok, queue_full, draining (refused: tandem drain), prefill_error, read_error, send_error," +
				" lease_expired, engine_error (an engine server failed after the header of a handoff by reference), deadline_exceeded" +
				" (the decode worker's deadline for it ran out), or cancelled (the decode worker or its client went away).",
		}, []string{"outcome"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_prefill_sent_bytes_total", Help: "KV bytes streamed to decode workers, by port: kv (the KV transfer port) or main.",
		}, []string{"port"}),
		queue: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tandem_prefill_queue_seconds", Help: "Time a prefill waited for the engine.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}),
		compute: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tandem_prefill_compute_seconds", Help: "Time the engine spent prefilling one prompt.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}),
	}
	reg.MustRegister(m.requests, m.bytes, m.queue, m.compute)
	return m
}
