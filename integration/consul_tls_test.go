package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/tandem-serve/tandem/internal/testutil"
)

// TestConsulCheckVerifiesTLS: with --check-tls-verify, Consul's health check of a
// TLS service verifies its certificate against the agent's CA: a service whose
// certificate matches passes, one whose certificate does not name what the check
// expects stays critical.
func TestConsulCheckVerifiesTLS(t *testing.T) {
	ca, cert, key := testPKI(t)
	a := startConsulWith(t, "-hcl", "enable_agent_tls_for_checks = true",
		"-hcl", fmt.Sprintf("tls { defaults { ca_file = %q } }", ca))
	flags := func(id string, extra ...string) []string {
		return append([]string{"decode", "--listen", "127.0.0.1:0", "--id", id, "--consul", a.Addr,
			"--check-interval", "500ms", "--check-timeout", "400ms",
			"--tls-cert", cert, "--tls-key", key, "--tls-ca", ca, "--check-tls-verify"}, extra...)
	}
	runService(t, flags("decode-verified")...)
	runService(t, flags("decode-misnamed", "--check-tls-server-name", "someone-else.example")...)

	testutil.WaitForWithin(t, 30*time.Second, "the verified worker passes its TLS check", func() bool {
		for _, e := range passing(t, a, "tandem-decode") {
			if e.Service.ID == "decode-verified" {
				return true
			}
		}
		return false
	})
	// Both checks run on the same schedule; give the misnamed one several more
	// intervals than the verified one needed. (Consul 1.14 records no output for a
	// failed gRPC check, so its error cannot be read back; the worker's log shows
	// "tls: bad certificate" from the agent.)
	time.Sleep(6 * 500 * time.Millisecond)
	checks, _, err := a.API.Health().Checks("tandem-decode", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range checks {
		if c.ServiceID == "decode-misnamed" && c.Status != api.HealthCritical {
			t.Errorf("misnamed worker's check is %s (%q), want critical", c.Status, c.Output)
		}
	}
	for _, e := range passing(t, a, "tandem-decode") {
		if e.Service.ID == "decode-misnamed" {
			t.Errorf("the worker whose certificate does not name %q is passing", "someone-else.example")
		}
	}
}
