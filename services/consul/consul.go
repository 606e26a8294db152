// Package consul connects a service to a Consul agent: it registers the service
// with a gRPC health check, watches the passing instances of other services with
// blocking queries, and watches runtime configuration in Consul KV. Nothing here
// is needed for static discovery.
package consul

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/services"
)

// Service names in the catalog.
const (
	FrontendService = "tandem-frontend"
	RouterService   = "tandem-router"
	DecodeService   = "tandem-decode"
	PrefillService  = "tandem-prefill"
)

// KV keys of the runtime configuration.
const (
	RouterConfigKey = "tandem/config/router"
	DecodeConfigKey = "tandem/config/decode"
	// PlannerConfigKey holds the planner's policy (its pin); PlannerPlanKey is
	// where the planner writes its plan and reason.
	PlannerConfigKey = "tandem/config/planner"
	PlannerPlanKey   = "tandem/planner/plan"
)

// Config is how a service reaches Consul and how it registers.
type Config struct {
	// Addr is the agent's HTTP address; empty means no Consul.
	Addr string
	// TokenFile holds the ACL token sent to the agent; empty leaves the token to
	// CONSUL_HTTP_TOKEN_FILE or CONSUL_HTTP_TOKEN, as Consul's own tools read them.
	// There is no flag taking the token itself: ps would show it.
	TokenFile string
	// Advertise is the host:port other services reach this one at; empty means the
	// listen address, with an unspecified host replaced by this host's address.
	Advertise       string
	CheckInterval   time.Duration
	CheckTimeout    time.Duration
	DeregisterAfter time.Duration
	Tags            services.List
	// CheckTLS makes the health check speak TLS, for a service serving it.
	CheckTLS bool
	// CheckTLSVerify makes the agent verify the service's certificate in that check,
	// against the CA of its own TLS configuration; CheckTLSServerName is the name it
	// checks (default: the advertised host).
	CheckTLSVerify     bool
	CheckTLSServerName string
}

// RegisterFlags registers the Consul flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "consul", "", "Consul agent HTTP address (host:port) for registration, discovery and runtime config; CONSUL_HTTP_ADDR also works")
	fs.StringVar(&c.TokenFile, "consul-token-file", "",
		"file holding the Consul ACL token (default: CONSUL_HTTP_TOKEN_FILE or CONSUL_HTTP_TOKEN from the environment)")
	fs.StringVar(&c.Advertise, "advertise", "",
		"host:port to register in Consul (default: the listen address, or this host's address when listening on all interfaces)")
	fs.DurationVar(&c.CheckInterval, "check-interval", 2*time.Second, "interval of Consul's gRPC health check of this service")
	fs.DurationVar(&c.CheckTimeout, "check-timeout", time.Second, "timeout of Consul's gRPC health check")
	fs.DurationVar(&c.DeregisterAfter, "deregister-after", time.Minute,
		"Consul removes this service after its check has been critical this long (a backstop for crashes)")
	fs.Var(&c.Tags, "tags", "comma-separated tags to register with")
	fs.BoolVar(&c.CheckTLSVerify, "check-tls-verify", false,
		"with TLS on, make Consul's health check verify this service's certificate; the agent needs enable_agent_tls_for_checks and a tls "+
			"ca_file that trusts --tls-ca (without it the check only tests that the service answers over TLS)")
	fs.StringVar(&c.CheckTLSServerName, "check-tls-server-name", "",
		"name the verifying health check expects in the certificate (default: the advertised host)")
}

// ValidateServing is Validate for a service that serves TLS or not: verifying
// the certificate in the health check needs one to verify.
func (c *Config) ValidateServing(tls bool) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Enabled() && c.CheckTLSVerify && !tls {
		return errors.New("--check-tls-verify needs TLS on the service (--tls-cert, --tls-key)")
	}
	return nil
}

// Enabled reports whether a Consul agent is configured.
func (c *Config) Enabled() bool { return c.Addr != "" }

// Validate checks the flags.
func (c *Config) Validate() error {
	if !c.Enabled() {
		return nil
	}
	if c.CheckInterval <= 0 || c.CheckTimeout <= 0 || c.CheckTimeout > c.CheckInterval {
		return fmt.Errorf("--check-timeout %s must be positive and at most --check-interval %s", c.CheckTimeout, c.CheckInterval)
	}
	if c.CheckTLSServerName != "" && !c.CheckTLSVerify {
		return fmt.Errorf("--check-tls-server-name %q is used only with --check-tls-verify", c.CheckTLSServerName)
	}
	if c.DeregisterAfter < time.Minute {
		// Consul rounds anything shorter up to a minute.
		return fmt.Errorf("--deregister-after %s: Consul's minimum is 1m", c.DeregisterAfter)
	}
	return nil
}

// Client is a Consul API client with the metrics its users share.
type Client struct {
	API     *api.Client
	log     *slog.Logger
	metrics *metrics
}

// NewClient returns a client for the agent at addr, sending the ACL token in
// tokenFile (or, when that is empty, the one the environment names).
func NewClient(addr, tokenFile string, log *slog.Logger, reg prometheus.Registerer) (*Client, error) {
	c, err := NewAPI(addr, tokenFile)
	if err != nil {
		return nil, err
	}
	return &Client{API: c, log: log, metrics: newMetrics(reg)}, nil
}

// NewAPI returns a Consul API client for the agent at addr. The api package's
// defaults read CONSUL_HTTP_TOKEN, CONSUL_HTTP_TOKEN_FILE, CONSUL_HTTP_SSL and
// CONSUL_CACERT; tokenFile, when given, wins over both token variables.
func NewAPI(addr, tokenFile string) (*api.Client, error) {
	cfg := api.DefaultConfig()
	cfg.Address = addr
	if tokenFile != "" {
		// Read by api.NewClient, ahead of both environment variables.
		cfg.TokenFile = tokenFile
	}
	c, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("consul client for %s: %w", addr, err)
	}
	return c, nil
}

// AdvertiseAddr is the address to register for a service listening on listen.
func AdvertiseAddr(advertise, listen string) (string, error) {
	if advertise != "" {
		return advertise, nil
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return listen, nil
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return net.JoinHostPort(n.IP.String(), port), nil
		}
	}
	return "", errors.New("no non-loopback IPv4 address to advertise; set --advertise")
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", p, err)
	}
	return host, port, nil
}

type metrics struct {
	errors        *prometheus.CounterVec
	registrations prometheus.Counter
	staleRemoved  prometheus.Counter
	watchUpdates  *prometheus.CounterVec
	configApplied *prometheus.CounterVec
	configReject  *prometheus.CounterVec
	members       *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_consul_errors_total", Help: "Failed Consul calls, by operation; the last known state stays in force meanwhile.",
		}, []string{"op"}),
		registrations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_consul_registrations_total", Help: "Times this service registered itself (again after a Consul restart).",
		}),
		staleRemoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_consul_stale_registrations_removed_total",
			Help: "Registrations of this service's name and address under another id (a predecessor that died without deregistering) removed from the local agent.",
		}),
		watchUpdates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_consul_membership_updates_total", Help: "Membership changes seen by blocking queries, by service.",
		}, []string{"service"}),
		configApplied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_config_applied_total", Help: "Runtime configs from Consul KV applied, by key.",
		}, []string{"key"}),
		configReject: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_config_rejected_total", Help: "Runtime configs from Consul KV rejected as invalid, by key; the last good one stays.",
		}, []string{"key"}),
		members: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tandem_consul_passing_instances", Help: "Passing instances of a watched service.",
		}, []string{"service"}),
	}
	reg.MustRegister(m.errors, m.registrations, m.staleRemoved, m.watchUpdates, m.configApplied, m.configReject, m.members)
	return m
}
