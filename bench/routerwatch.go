package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// watchRouter samples the router's gating figures (the adaptive ISL threshold,
// its moves, the requests sent to each class) every interval until ctx ends,
// writing one line per sample to w: seconds since the start, then each metric
// as name=value. It shows the adaptive threshold moving under load, which the
// end-of-run report cannot.
func watchRouter(ctx context.Context, routerURL string, interval time.Duration, w io.Writer) {
	start := time.Now()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if line := sampleRouter(ctx, routerURL); line != "" {
			fmt.Fprintf(w, "%.1f %s\n", time.Since(start).Seconds(), line)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// routerGauges are the metric name prefixes watchRouter keeps.
var routerGauges = []string{"tandem_router_isl_threshold_tokens", "tandem_router_isl_threshold_moves_total", "tandem_router_gate_total"}

func sampleRouter(ctx context.Context, routerURL string) string {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, routerURL+"/metrics", nil)
	if err != nil {
		return ""
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	return routerLine(resp.Body)
}

// routerLine picks the gating metrics out of a Prometheus text exposition.
func routerLine(r io.Reader) string {
	var parts []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		for _, g := range routerGauges {
			if strings.HasPrefix(line, g) {
				name, value, _ := strings.Cut(line, " ")
				parts = append(parts, strings.TrimPrefix(name, "tandem_router_")+"="+value)
			}
		}
	}
	return strings.Join(parts, " ")
}
