package openaihttp

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tandem-serve/tandem/engine"
)

// LoadMetrics names the Prometheus series an engine reports its load in. Each
// list is tried in order; the first present wins (names change across versions).
type LoadMetrics struct {
	Running, Waiting []string // gauges of requests
	// KVUsage is the fraction of the KV pool in use, 0 to 1.
	KVUsage []string
	// TotalBlocks is a gauge of the KV pool's blocks, or (TotalBlocksLabel set)
	// an info series whose label of that name carries it (vLLM's
	// vllm:cache_config_info{num_gpu_blocks="..."}).
	TotalBlocks      []string
	TotalBlocksLabel string
	// PrefixQueries and PrefixHits are counters of prompt tokens looked up in the
	// prefix cache and found there (vLLM's prefix_cache_queries / hits).
	PrefixQueries, PrefixHits []string
}

// Sample is one series of a Prometheus text exposition.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// ParseMetrics reads the Prometheus text exposition format (version 0.0.4, what
// vLLM, SGLang and TRT-LLM serve) into one Sample per series, sorted by name. A
// histogram or summary comes out as its _bucket (le), quantile, _sum and _count
// series, as they appear on the wire. A malformed exposition is an error naming
// the line.
//
// The parsing is expfmt's, the Prometheus server's own: the format has corners
// (escapes, quoted UTF-8 names, TYPE and HELP ordering, histogram grouping)
// that a hand-written reader got partly right.
func ParseMetrics(b []byte) ([]Sample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	var out []Sample
	for _, name := range slices.Sorted(maps.Keys(families)) {
		out = appendSamples(out, families[name])
	}
	return out, nil
}

// appendSamples flattens one family into the series it was exposed as.
func appendSamples(out []Sample, mf *dto.MetricFamily) []Sample {
	name := mf.GetName()
	for _, m := range mf.GetMetric() {
		labels := make(map[string]string, len(m.GetLabel()))
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		with := func(k, v string) map[string]string {
			l := maps.Clone(labels)
			if l == nil {
				l = map[string]string{}
			}
			l[k] = v
			return l
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			out = append(out, Sample{Name: name, Labels: labels, Value: m.GetCounter().GetValue()})
		case dto.MetricType_GAUGE:
			out = append(out, Sample{Name: name, Labels: labels, Value: m.GetGauge().GetValue()})
		case dto.MetricType_SUMMARY:
			sm := m.GetSummary()
			for _, q := range sm.GetQuantile() {
				out = append(out, Sample{Name: name, Labels: with("quantile", formatFloat(q.GetQuantile())), Value: q.GetValue()})
			}
			out = append(out, Sample{Name: name + "_sum", Labels: labels, Value: sm.GetSampleSum()},
				Sample{Name: name + "_count", Labels: labels, Value: float64(sm.GetSampleCount())})
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			h := m.GetHistogram()
			for _, b := range h.GetBucket() {
				out = append(out, Sample{Name: name + "_bucket", Labels: with("le", formatFloat(b.GetUpperBound())),
					Value: float64(b.GetCumulativeCount())})
			}
			out = append(out, Sample{Name: name + "_sum", Labels: labels, Value: h.GetSampleSum()},
				Sample{Name: name + "_count", Labels: labels, Value: float64(h.GetSampleCount())})
		default: // untyped
			out = append(out, Sample{Name: name, Labels: labels, Value: m.GetUntyped().GetValue()})
		}
	}
	return out
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// Load is what an engine's metrics say of its load.
type Load struct {
	Running, Waiting int
	KVUsage          float64 // 0 to 1; -1 when not reported
	TotalBlocks      int     // 0 when not reported
	// PrefixQueries and PrefixHits are the engine's counters, 0 when not reported.
	PrefixQueries, PrefixHits uint64
}

// LoadFrom reads a Load from samples, summing a gauge's series (an engine with
// several data-parallel ranks or labels reports one per rank).
func LoadFrom(samples []Sample, m LoadMetrics) Load {
	first := func(names []string, label string) (float64, bool) {
		for _, name := range names {
			sum, found := 0.0, false
			for _, s := range samples {
				if s.Name != name || math.IsNaN(s.Value) || math.IsInf(s.Value, 0) {
					continue
				}
				v := s.Value
				if label != "" {
					var err error
					if v, err = strconv.ParseFloat(s.Labels[label], 64); err != nil {
						continue
					}
				}
				sum, found = sum+v, true
			}
			if found {
				return sum, true
			}
		}
		return 0, false
	}
	l := Load{KVUsage: -1}
	if v, ok := first(m.Running, ""); ok {
		l.Running = int(max(v, 0))
	}
	if v, ok := first(m.Waiting, ""); ok {
		l.Waiting = int(max(v, 0))
	}
	if v, ok := first(m.KVUsage, ""); ok {
		// vLLM reports a fraction; a percentage would read as full.
		l.KVUsage = min(max(v, 0), 1)
	}
	if v, ok := first(m.TotalBlocks, m.TotalBlocksLabel); ok && v > 0 && v < 1<<31 {
		l.TotalBlocks = int(v)
	}
	if v, ok := first(m.PrefixQueries, ""); ok && v >= 0 && v < math.MaxInt64 {
		l.PrefixQueries = uint64(v)
	}
	if v, ok := first(m.PrefixHits, ""); ok && v >= 0 && v < math.MaxInt64 {
		l.PrefixHits = uint64(v)
	}
	return l
}

// scraper polls the engine's metrics and keeps the last load.
type scraper struct {
	c         *client
	d         Dialect
	blockSize int
	fixed     int // total blocks from the config; 0: from the metrics
	log       *slog.Logger
	done      chan struct{}
	stopOnce  sync.Once

	mu     sync.Mutex
	last   Load
	failed bool // the last scrape failed (logged once per failure streak)
}

func newScraper(c *client, d Dialect, blockSize, fixed int, log *slog.Logger) *scraper {
	return &scraper{c: c, d: d, blockSize: blockSize, fixed: fixed, log: log, done: make(chan struct{}), last: Load{KVUsage: -1}}
}

func (s *scraper) run(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		s.scrape()
		select {
		case <-s.done:
			return
		case <-t.C:
		}
	}
}

func (s *scraper) scrape() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := s.c.get(ctx, s.d.MetricsPath)
	var samples []Sample
	if err == nil {
		samples, err = ParseMetrics(b)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if !s.failed {
			s.log.Warn("engine metrics unreadable; load reports keep their last values", "path", s.d.MetricsPath, "error", err)
		}
		s.failed = true
		return
	}
	if s.failed {
		s.log.Info("engine metrics readable again", "path", s.d.MetricsPath)
	}
	s.failed = false
	s.last = LoadFrom(samples, s.d.Load)
}

func (s *scraper) stop() { s.stopOnce.Do(func() { close(s.done) }) }

func (s *scraper) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.totalLocked()
}

func (s *scraper) totalLocked() int {
	switch {
	case s.fixed > 0:
		return s.fixed
	case s.last.TotalBlocks > 0:
		return s.last.TotalBlocks
	}
	return DefaultTotalBlocks
}

// stats converts the last load into engine.Stats: blocks in use from the KV
// usage fraction, the rest free.
func (s *scraper) stats() engine.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	total := s.totalLocked()
	active := 0
	if s.last.KVUsage >= 0 {
		active = int(math.Round(s.last.KVUsage * float64(total)))
	}
	return engine.Stats{TotalBlocks: total, ActiveBlocks: active, FreeBlocks: total - active,
		Running: s.last.Running, Waiting: s.last.Waiting,
		PrefixQueryTokens: s.last.PrefixQueries, PrefixHitTokens: min(s.last.PrefixHits, s.last.PrefixQueries)}
}
