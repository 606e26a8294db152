package main

import (
	"crypto/tls"
	"flag"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tandem-serve/tandem/services/tlsconf"
)

// clientTLS is the TLS flags of a command that calls a service: --tls-ca to verify
// it, --tls-cert/--tls-key when it asks for a client certificate (every call but
// health checks under mTLS), --tls-insecure to skip verification.
type clientTLS struct {
	tlsconf.Config
	insecure bool
}

func (c *clientTLS) RegisterFlags(fs *flag.FlagSet) {
	c.Config.RegisterFlags(fs)
	fs.BoolVar(&c.insecure, "tls-insecure", false, "speak TLS without verifying the server's certificate")
}

// creds are the transport credentials the flags ask for: cleartext without any.
func (c *clientTLS) creds() (credentials.TransportCredentials, error) {
	if c.Cert == "" && c.CA == "" && !c.insecure {
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{InsecureSkipVerify: c.insecure}
	if c.Cert != "" || c.CA != "" {
		t, err := c.Client()
		if err != nil {
			return nil, err
		}
		cfg = t
		cfg.InsecureSkipVerify = c.insecure
	}
	return credentials.NewTLS(cfg), nil
}

// dial is a client connection to addr with the credentials the flags ask for.
func (c *clientTLS) dial(addr string) (*grpc.ClientConn, error) {
	creds, err := c.creds()
	if err != nil {
		return nil, err
	}
	return grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
}
