package bench

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Gating is the router's gating through a deployment's runs, as sampled each
// second: the adaptive ISL threshold's path and the requests sent to each class.
type Gating struct {
	// Path is the threshold at the first sample and at every sample where it had
	// changed, with the seconds since the watch began.
	Path      []ThresholdPoint `json:"threshold_path"`
	MovesUp   int              `json:"moves_up"`
	MovesDown int              `json:"moves_down"`
	// Routed counts the requests by the class scored (tandem_router_gate_total).
	Routed map[string]int `json:"routed_by_class,omitempty"`
}

// ThresholdPoint is the threshold in force at a second of the run.
type ThresholdPoint struct {
	S      float64 `json:"s"`
	Tokens int     `json:"tokens"`
}

// gatingSample is one sample of the router's gating figures.
type gatingSample struct {
	threshold float64
	hasThresh bool
	moves     map[string]float64 // by direction; "" from a router without the label
	routed    map[string]float64 // by class
}

// watchRouter samples the router's gating figures every interval until ctx ends,
// writing one line per sample to w (seconds since the start, then each figure as
// name=value), and returns their path. It shows the adaptive threshold moving
// under load, which the end-of-run tables cannot.
func watchRouter(ctx context.Context, routerURL string, interval time.Duration, w io.Writer) *Gating {
	start := time.Now()
	t := time.NewTicker(interval)
	defer t.Stop()
	g := &Gating{}
	for {
		if s, ok := sampleRouter(ctx, routerURL); ok {
			at := time.Since(start).Seconds()
			fmt.Fprintf(w, "%.1f %s\n", at, s.line())
			g.add(at, s)
		}
		select {
		case <-ctx.Done():
			return g
		case <-t.C:
		}
	}
}

func sampleRouter(ctx context.Context, routerURL string) (gatingSample, bool) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, routerURL+"/metrics", nil)
	if err != nil {
		return gatingSample{}, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return gatingSample{}, false
	}
	defer resp.Body.Close()
	s, err := parseGating(resp.Body)
	return s, err == nil
}

// parseGating reads the gating metrics out of a Prometheus text exposition.
func parseGating(r io.Reader) (gatingSample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(r)
	if err != nil {
		return gatingSample{}, err
	}
	s := gatingSample{moves: map[string]float64{}, routed: map[string]float64{}}
	if mf := mfs["tandem_router_isl_threshold_tokens"]; mf != nil && len(mf.GetMetric()) > 0 {
		s.threshold, s.hasThresh = mf.GetMetric()[0].GetGauge().GetValue(), true
	}
	byLabel := func(name, label string, into map[string]float64) {
		for _, m := range mfs[name].GetMetric() {
			into[labelValue(m, label)] += m.GetCounter().GetValue()
		}
	}
	byLabel("tandem_router_isl_threshold_moves_total", "direction", s.moves)
	byLabel("tandem_router_gate_total", "class", s.routed)
	return s, nil
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// line is the sample as watchRouter writes it.
func (s gatingSample) line() string {
	var parts []string
	if s.hasThresh {
		parts = append(parts, "isl_threshold_tokens="+strconv.FormatFloat(s.threshold, 'f', -1, 64))
	}
	for _, d := range slices.Sorted(maps.Keys(s.moves)) {
		name := "isl_threshold_moves_total"
		if d != "" {
			name += "{direction=" + strconv.Quote(d) + "}"
		}
		parts = append(parts, name+"="+strconv.FormatFloat(s.moves[d], 'f', -1, 64))
	}
	for _, c := range slices.Sorted(maps.Keys(s.routed)) {
		parts = append(parts, "gate_total{class="+strconv.Quote(c)+"}="+strconv.FormatFloat(s.routed[c], 'f', -1, 64))
	}
	return strings.Join(parts, " ")
}

// add records a sample: the threshold when it changed, and the latest counts.
func (g *Gating) add(at float64, s gatingSample) {
	if s.hasThresh {
		tok := int(s.threshold)
		if n := len(g.Path); n == 0 || g.Path[n-1].Tokens != tok {
			g.Path = append(g.Path, ThresholdPoint{S: at, Tokens: tok})
		}
	}
	g.MovesUp, g.MovesDown = int(s.moves["up"]), int(s.moves["down"])
	if n := int(s.moves[""]); n > 0 {
		// A router from before moves had a direction: counted as up, as they all were.
		g.MovesUp += n
	}
	g.Routed = map[string]int{}
	for c, v := range s.routed {
		g.Routed[c] = int(v)
	}
}

// String is the path in a line: every point when there are few, else the first
// few, the lowest and highest, and the last.
func (g *Gating) String() string {
	if g == nil || len(g.Path) == 0 {
		return "no gating figures sampled"
	}
	pts := g.Path
	point := func(p ThresholdPoint) string { return fmt.Sprintf("%d (%.0f s)", p.Tokens, p.S) }
	var parts []string
	if len(pts) <= 10 {
		for _, p := range pts {
			parts = append(parts, point(p))
		}
	} else {
		for _, p := range pts[:4] {
			parts = append(parts, point(p))
		}
		lo, hi := slices.MinFunc(pts, func(a, b ThresholdPoint) int { return a.Tokens - b.Tokens }),
			slices.MaxFunc(pts, func(a, b ThresholdPoint) int { return a.Tokens - b.Tokens })
		parts = append(parts, fmt.Sprintf("... %d changes, lowest %s, highest %s ...", len(pts)-5, point(lo), point(hi)), point(pts[len(pts)-1]))
	}
	out := fmt.Sprintf("ISL threshold %s; moves %d up, %d down", strings.Join(parts, " -> "), g.MovesUp, g.MovesDown)
	if len(g.Routed) > 0 {
		var rs []string
		for _, c := range slices.Sorted(maps.Keys(g.Routed)) {
			rs = append(rs, fmt.Sprintf("%s=%d", c, g.Routed[c]))
		}
		out += "; routed by class " + strings.Join(rs, " ")
	}
	return out
}
