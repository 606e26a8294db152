package consul

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
)

// Registration is what a service registers.
type Registration struct {
	Name string
	ID   string
	// Addr is the advertised host:port; the gRPC health check dials it.
	Addr string
	Meta map[string]string
}

// agentCallTimeout bounds each call to the local agent: a hung agent must not
// hold up a drain, which deregisters first.
const agentCallTimeout = 5 * time.Second

// Registrar keeps a service registered: it registers on Run, registers again
// whenever the agent has lost it (a Consul restart), and deregisters on Deregister.
type Registrar struct {
	c   *Client
	reg *api.AgentServiceRegistration

	// mu makes Deregister final: a check-and-register in Run that was under way when
	// the drain began would otherwise put the service back in the catalog.
	mu   sync.Mutex
	gone bool
}

// NewRegistrar prepares the registration of r with cfg's health check settings.
func (c *Client) NewRegistrar(cfg Config, r Registration) (*Registrar, error) {
	host, port, err := splitHostPort(r.Addr)
	if err != nil {
		return nil, fmt.Errorf("advertise address %q: %w", r.Addr, err)
	}
	// Unless asked to verify, the check tests that the service answers, not who it
	// is: an agent trusts this deployment's CA only when configured to.
	verify := cfg.CheckTLS && cfg.CheckTLSVerify
	serverName := ""
	if verify {
		serverName = cmp.Or(cfg.CheckTLSServerName, host)
	}
	return &Registrar{c: c, reg: &api.AgentServiceRegistration{
		ID: r.ID, Name: r.Name, Address: host, Port: port, Tags: cfg.Tags, Meta: r.Meta,
		Check: &api.AgentServiceCheck{
			CheckID: r.ID + "-grpc", Name: "gRPC health of " + r.ID,
			GRPC: r.Addr, Interval: cfg.CheckInterval.String(), Timeout: cfg.CheckTimeout.String(),
			DeregisterCriticalServiceAfter: cfg.DeregisterAfter.String(),
			GRPCUseTLS:                     cfg.CheckTLS,
			TLSSkipVerify:                  cfg.CheckTLS && !verify,
			TLSServerName:                  serverName,
		},
	}}, nil
}

// Run registers, then checks every interval that the agent still knows the
// service, until ctx ends. Failures are logged and counted, never fatal: the
// service keeps serving while Consul is away.
func (r *Registrar) Run(ctx context.Context, interval time.Duration) {
	registered := false
	for {
		r.mu.Lock()
		if r.gone {
			r.mu.Unlock()
			return
		}
		// Bounded: the lock is held across these calls, and a drain waits on it.
		cctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
		if !registered || !r.known(cctx) {
			if err := r.c.API.Agent().ServiceRegisterOpts(r.reg, api.ServiceRegisterOpts{}.WithContext(cctx)); err != nil {
				r.c.metrics.errors.WithLabelValues("register").Inc()
				r.c.log.Warn("consul: cannot register; retrying", "consul_service", r.reg.Name, "id", r.reg.ID, "error", err)
				registered = false
			} else {
				r.c.metrics.registrations.Inc()
				r.c.log.Info("consul: registered", "consul_service", r.reg.Name, "id", r.reg.ID, "address", r.reg.Address, "port", r.reg.Port)
				registered = true
				r.removeStale(cctx)
			}
		}
		cancel()
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// removeStale deregisters the registrations of this service's name at its
// address under another id: a predecessor killed without deregistering, which
// its host's agent restored from its data directory. Its health check dials this
// address, so this process would keep it passing, a ghost worker in routing.
func (r *Registrar) removeStale(ctx context.Context) {
	filter := fmt.Sprintf("Service == %q and Address == %q and Port == %d", r.reg.Name, r.reg.Address, r.reg.Port)
	services, err := r.c.API.Agent().ServicesWithFilterOpts(filter, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		r.c.metrics.errors.WithLabelValues("stale_lookup").Inc()
		r.c.log.Warn("consul: cannot list this agent's services to remove stale registrations", "error", err)
		return
	}
	for id := range services {
		if id == r.reg.ID {
			continue
		}
		if err := r.c.API.Agent().ServiceDeregisterOpts(id, (&api.QueryOptions{}).WithContext(ctx)); err != nil {
			r.c.metrics.errors.WithLabelValues("stale_deregister").Inc()
			r.c.log.Warn("consul: cannot remove a stale registration at this address", "stale_id", id, "error", err)
			continue
		}
		r.c.metrics.staleRemoved.Inc()
		r.c.log.Info("consul: removed a stale registration at this address", "consul_service", r.reg.Name, "stale_id", id, "id", r.reg.ID)
	}
}

func (r *Registrar) known(ctx context.Context) bool {
	s, _, err := r.c.API.Agent().Service(r.reg.ID, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		r.c.metrics.errors.WithLabelValues("service_lookup").Inc()
		return false
	}
	return s != nil
}

// Deregister removes the service, so that nobody is sent to it while it drains.
func (r *Registrar) Deregister() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gone = true
	ctx, cancel := context.WithTimeout(context.Background(), agentCallTimeout)
	defer cancel()
	if err := r.c.API.Agent().ServiceDeregisterOpts(r.reg.ID, (&api.QueryOptions{}).WithContext(ctx)); err != nil {
		r.c.metrics.errors.WithLabelValues("deregister").Inc()
		r.c.log.Warn("consul: cannot deregister", "id", r.reg.ID, "error", err)
		return
	}
	r.c.log.Info("consul: deregistered", "id", r.reg.ID)
}
