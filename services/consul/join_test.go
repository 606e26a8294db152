package consul

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus"
)

// A second registration made with Also lists the same address under another
// service name and id, with its own metadata, through the member's client (a
// second client would register its metrics twice and panic).
func TestAlsoRegistersTheSameAddressAgain(t *testing.T) {
	var mu sync.Mutex
	got := map[string]api.AgentServiceRegistration{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/agent/service/register") {
			var reg api.AgentServiceRegistration
			if err := json.NewDecoder(r.Body).Decode(&reg); err != nil {
				t.Error(err)
			}
			mu.Lock()
			got[reg.ID] = reg
			mu.Unlock()
		}
	}))
	defer srv.Close()
	cfg := Config{Addr: strings.TrimPrefix(srv.URL, "http://"), CheckInterval: time.Hour, CheckTimeout: time.Second, DeregisterAfter: time.Minute}
	m, err := Join(cfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry(), DecodeService, "agg-1", "127.0.0.1:9000", map[string]string{"mode": "aggregated"})
	if err != nil {
		t.Fatal(err)
	}
	also, err := m.Also(cfg, PrefillService, "agg-1-lend", map[string]string{"worker_id": "agg-1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go m.Run(ctx)
	go also.Run(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("registrations %v, want two", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	d, p := got["agg-1"], got["agg-1-lend"]
	if d.Name != DecodeService || p.Name != PrefillService || d.Address != p.Address || d.Port != p.Port || d.Port != 9000 ||
		p.Meta["worker_id"] != "agg-1" || p.Check.CheckID != "agg-1-lend-grpc" {
		t.Errorf("registrations %+v and %+v", d, p)
	}
}
