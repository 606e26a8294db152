package workersvc

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/engine"
)

// registerPoolMetrics exposes the engine's KV pool and queue, read at scrape time,
// with the nouns vLLM's dashboards use (running, waiting, KV cache usage).
func registerPoolMetrics(reg prometheus.Registerer, eng engine.Engine) {
	for _, state := range []string{"free", "cached", "active"} {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tandem_kv_cache_blocks", Help: "KV cache blocks by state: free, cached (reusable prefix, evictable), active (held by sequences).",
			ConstLabels: prometheus.Labels{"state": state},
		}, func() float64 {
			st := eng.Stats()
			switch state {
			case "free":
				return float64(st.FreeBlocks)
			case "cached":
				return float64(st.CachedBlocks)
			}
			return float64(st.ActiveBlocks)
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
	)
}
