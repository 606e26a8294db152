// Package admin is what tandem's operator commands (health, drain, route, workers,
// config) do: the gRPC and Consul calls and what they print. cmd/tandem parses
// their flags and calls these.
package admin

import (
	"crypto/tls"
	"flag"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tandem-serve/tandem/services/tlsconf"
)

// ClientTLS is the TLS flags of a command that calls a service: --tls-ca to verify
// it, --tls-cert/--tls-key when it asks for a client certificate (every call but
// health checks under mTLS), --tls-insecure to skip verification.
type ClientTLS struct {
	tlsconf.Config
	Insecure bool
}

// RegisterFlags registers the TLS flags.
func (c *ClientTLS) RegisterFlags(fs *flag.FlagSet) {
	c.Config.RegisterFlags(fs)
	fs.BoolVar(&c.Insecure, "tls-insecure", false, "speak TLS without verifying the server's certificate")
}

// Creds are the transport credentials the flags ask for: cleartext without any.
func (c *ClientTLS) Creds() (credentials.TransportCredentials, error) {
	if c.Cert == "" && c.CA == "" && !c.Insecure {
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{InsecureSkipVerify: c.Insecure}
	if c.Cert != "" || c.CA != "" {
		t, err := c.Client()
		if err != nil {
			return nil, err
		}
		cfg = t
		cfg.InsecureSkipVerify = c.Insecure
	}
	return credentials.NewTLS(cfg), nil
}

// Dial is a client connection to addr with the credentials the flags ask for.
func (c *ClientTLS) Dial(addr string) (*grpc.ClientConn, error) {
	creds, err := c.Creds()
	if err != nil {
		return nil, err
	}
	return grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
}
