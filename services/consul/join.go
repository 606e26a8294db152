package consul

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Member is a service's presence in Consul: its registration and the client its
// watches use.
type Member struct {
	Client    *Client
	registrar *Registrar
	interval  time.Duration
}

// Join prepares the registration of a service listening on listenAddr. It returns
// nil when Consul is off. Call Run to register and Deregister when draining.
func Join(cfg Config, log *slog.Logger, reg prometheus.Registerer, name, id, listenAddr string, meta map[string]string) (*Member, error) {
	if !cfg.Enabled() {
		return nil, nil
	}
	addr, err := AdvertiseAddr(cfg.Advertise, listenAddr)
	if err != nil {
		return nil, err
	}
	c, err := NewClient(cfg.Addr, log, reg)
	if err != nil {
		return nil, err
	}
	r, err := c.NewRegistrar(cfg, Registration{Name: name, ID: id, Addr: addr, Meta: meta})
	if err != nil {
		return nil, err
	}
	return &Member{Client: c, registrar: r, interval: cfg.CheckInterval}, nil
}

// Run keeps the service registered until ctx ends.
func (m *Member) Run(ctx context.Context) { m.registrar.Run(ctx, m.interval) }

// Deregister removes the service from the catalog.
func (m *Member) Deregister() { m.registrar.Deregister() }
