package plannersvc

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/planner"
)

type metrics struct {
	decisions *prometheus.CounterVec
	switches  prometheus.Counter
	moved     prometheus.Counter
	workers   *prometheus.GaugeVec
	threshold prometheus.Gauge
	capacity  *prometheus.GaugeVec
	rate      prometheus.Gauge
	pinned    prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_planner_decisions_total", Help: "Planner decisions, by outcome: kept, switched or pinned.",
		}, []string{"outcome"}),
		switches: prometheus.NewCounter(prometheus.CounterOpts{Name: "tandem_planner_switches_total", Help: "Plans that changed some worker's role."}),
		moved:    prometheus.NewCounter(prometheus.CounterOpts{Name: "tandem_planner_workers_moved_total", Help: "Worker role changes the planner made."}),
		workers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tandem_planner_workers", Help: "Workers by role in the current plan (prefill or decode).",
		}, []string{"role"}),
		threshold: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tandem_planner_isl_threshold", Help: "The plan's ISL threshold in tokens (0: no remote prefill)."}),
		capacity: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tandem_planner_projected_capacity", Help: "Projected capacity in requests/s of the plan's shape and of the best shape found.",
		}, []string{"shape"}),
		rate:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "tandem_planner_arrival_rate", Help: "The averaged arrival rate the planner saw, requests/s."}),
		pinned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tandem_planner_pinned", Help: "1 while an operator's pin holds the plan."}),
	}
	if reg != nil {
		reg.MustRegister(m.decisions, m.switches, m.moved, m.workers, m.threshold, m.capacity, m.rate, m.pinned)
	}
	return m
}

func (m *metrics) note(p planner.Plan, obs planner.Observation) {
	outcome := "kept"
	switch {
	case p.Pinned:
		outcome = "pinned"
	case p.Switched:
		outcome = "switched"
	}
	m.decisions.WithLabelValues(outcome).Inc()
	if p.Switched {
		m.switches.Inc()
		m.moved.Add(float64(p.Moved))
	}
	m.workers.WithLabelValues("prefill").Set(float64(p.Shape.Prefill))
	m.workers.WithLabelValues("decode").Set(float64(p.Shape.Decode))
	th := p.Shape.Threshold
	if p.Shape.Prefill == 0 {
		th = 0
	}
	m.threshold.Set(float64(th))
	m.capacity.WithLabelValues("plan").Set(p.Projected.Capacity)
	m.capacity.WithLabelValues("best").Set(p.Best.Capacity)
	m.rate.Set(obs.Rate)
}
