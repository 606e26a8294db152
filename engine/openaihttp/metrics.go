package openaihttp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

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

// ParseMetrics reads the Prometheus text format: comments skipped, one sample a
// line, labels with escaped quoted values. A malformed line is an error naming it.
func ParseMetrics(b []byte) ([]Sample, error) {
	var out []Sample
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d: %w", n, err)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseSample(line string) (Sample, error) {
	i := strings.IndexAny(line, "{ \t")
	if i <= 0 {
		return Sample{}, fmt.Errorf("no value in %q", line)
	}
	s := Sample{Name: line[:i]}
	rest := line[i:]
	if rest[0] == '{' {
		labels, after, err := parseLabels(rest[1:])
		if err != nil {
			return Sample{}, fmt.Errorf("%s: %w", s.Name, err)
		}
		s.Labels, rest = labels, after
	}
	f := strings.Fields(rest)
	if len(f) == 0 || len(f) > 2 {
		return Sample{}, fmt.Errorf("%s: want a value and an optional timestamp, got %q", s.Name, rest)
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return Sample{}, fmt.Errorf("%s: value %q: %w", s.Name, f[0], err)
	}
	s.Value = v
	return s, nil
}

// parseLabels reads `k="v",...}` and returns the labels and what follows the brace.
func parseLabels(s string) (map[string]string, string, error) {
	labels := map[string]string{}
	for {
		s = strings.TrimLeft(s, " \t,")
		if s == "" {
			return nil, "", errors.New("labels not closed")
		}
		if s[0] == '}' {
			return labels, s[1:], nil
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			return nil, "", fmt.Errorf("label at %q", s)
		}
		key := strings.TrimSpace(s[:eq])
		var val strings.Builder
		j := eq + 2
		for ; j < len(s) && s[j] != '"'; j++ {
			if s[j] == '\\' && j+1 < len(s) {
				j++
				switch s[j] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(s[j])
				}
				continue
			}
			val.WriteByte(s[j])
		}
		if j >= len(s) {
			return nil, "", fmt.Errorf("label %s: value not closed", key)
		}
		labels[key] = val.String()
		s = s[j+1:]
	}
}

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
