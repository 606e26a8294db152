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
	addr      string // advertised
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
	c, err := NewClient(cfg.Addr, cfg.TokenFile, log, reg)
	if err != nil {
		return nil, err
	}
	r, err := c.NewRegistrar(cfg, Registration{Name: name, ID: id, Addr: addr, Meta: meta})
	if err != nil {
		return nil, err
	}
	return &Member{Client: c, registrar: r, interval: cfg.CheckInterval, addr: addr}, nil
}

// Also prepares a second registration of m's address under another service name
// and id, sharing m's client: an aggregated worker lending prefill is listed as a
// decode and as a prefill worker at one address. Run and Deregister it apart.
func (m *Member) Also(cfg Config, name, id string, meta map[string]string) (*Member, error) {
	r, err := m.Client.NewRegistrar(cfg, Registration{Name: name, ID: id, Addr: m.addr, Meta: meta})
	if err != nil {
		return nil, err
	}
	return &Member{Client: m.Client, registrar: r, interval: m.interval, addr: m.addr}, nil
}

// Run keeps the service registered until ctx ends.
func (m *Member) Run(ctx context.Context) { m.registrar.Run(ctx, m.interval) }

// Deregister removes the service from the catalog.
func (m *Member) Deregister() { m.registrar.Deregister() }
