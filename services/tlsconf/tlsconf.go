// Package tlsconf turns the --tls-cert, --tls-key and --tls-ca flags into TLS
// configurations: TLS on a service's port, and mutual TLS between services.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// Config names the PEM files.
type Config struct {
	Cert string
	Key  string
	// CA verifies peers: servers require client certificates it signed (mutual
	// TLS) and clients verify servers with it.
	CA string
}

// RegisterFlags registers the TLS flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Cert, "tls-cert", "", "PEM certificate this service presents, as a server and as a client of other services (default: plaintext)")
	fs.StringVar(&c.Key, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&c.CA, "tls-ca", "",
		"PEM CA bundle: services require client certificates it signed (mutual TLS; health checks exempt) and verify servers with it")
}

// Enabled reports whether this service serves TLS.
func (c Config) Enabled() bool { return c.Cert != "" }

// Validate checks the flags name a usable set.
func (c Config) Validate() error {
	if (c.Cert == "") != (c.Key == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if c.CA != "" && c.Cert == "" {
		return errors.New("--tls-ca needs --tls-cert and --tls-key: mutual TLS means presenting a certificate too")
	}
	return nil
}

func (c Config) pool() (*x509.CertPool, error) {
	pem, err := os.ReadFile(c.CA)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca: %w", err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", c.CA)
	}
	return p, nil
}

// Server is the TLS configuration for serving, or nil for plaintext. With a CA
// and requireClients, clients must present a certificate the CA signed; the check
// is made per request (see RequireClientCert) so that health checks without one
// still pass.
func (c Config) Server(requireClients bool) (*tls.Config, error) {
	if !c.Enabled() {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.Cert, c.Key)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.CA != "" && requireClients {
		if cfg.ClientCAs, err = c.pool(); err != nil {
			return nil, err
		}
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return cfg, nil
}

// Client is the TLS configuration for calling other services, or nil for
// plaintext. Without a certificate it only verifies servers (a health checker).
func (c Config) Client() (*tls.Config, error) {
	if c.Cert == "" && c.CA == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.Cert != "" {
		cert, err := tls.LoadX509KeyPair(c.Cert, c.Key)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if c.CA != "" {
		var err error
		if cfg.RootCAs, err = c.pool(); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// healthPath is exempt from client certificates: Consul's and compose's health
// checks have none.
const healthPath = "/grpc.health.v1.Health/"

// RequireClientCert refuses, with 401, every request without a verified client
// certificate, except health checks.
func RequireClientCert(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) && !strings.HasPrefix(r.URL.Path, healthPath) {
			http.Error(w, "a client certificate signed by this deployment's CA is required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
