package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The deployment's volumes, each mounted where only its users see it: the CA's
// key and the token list stay in ca, which only this program mounts.
type dirs struct {
	ca, server, client string
	root               string
}

func layout(root string) dirs {
	return dirs{root: root, ca: filepath.Join(root, "ca"), server: filepath.Join(root, "server"), client: filepath.Join(root, "client")}
}

// tokenDir is the volume holding role's token file, mounted only into that
// role's containers.
func (d dirs) tokenDir(role string) string { return filepath.Join(d.root, "token-"+role) }

// Roles with a token of their own; "agent" is the Consul agents' node token.
var roles = []string{"agent", "frontend", "router", "prefill", "decode", "operator"}

// token is an ACL token's ids, chosen here so that the agents' configuration can
// name the agent token before the servers exist.
type token struct {
	Accessor string `json:"accessor"`
	Secret   string `json:"secret"`
}

type tokens struct {
	Management string           `json:"management"`
	Roles      map[string]token `json:"roles"`
}

const datacenter = "dc1"

func makeSecrets(ctx context.Context, d dirs, consul string, stdout io.Writer) error {
	done := filepath.Join(d.ca, ".done")
	if _, err := os.Stat(done); err == nil {
		fmt.Fprintln(stdout, "secrets exist already; keeping them")
		return nil
	}
	for _, dir := range []string{d.ca, d.server, d.client} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
	}
	// consul tls writes into its working directory and refuses to overwrite.
	for _, f := range []string{"consul-agent-ca.pem", "consul-agent-ca-key.pem", datacenter + "-server-consul-0.pem",
		datacenter + "-server-consul-0-key.pem", datacenter + "-client-consul-0.pem", datacenter + "-client-consul-0-key.pem"} {
		_ = os.Remove(filepath.Join(d.ca, f))
	}
	steps := [][]string{
		{"tls", "ca", "create", "-days", "1825"},
		// One server certificate for the three servers: server.dc1.consul, which
		// verify_server_hostname checks, and the container names HTTPS is reached by.
		{"tls", "cert", "create", "-server", "-dc", datacenter, "-days", "365",
			"-additional-dnsname", "server-1", "-additional-dnsname", "server-2", "-additional-dnsname", "server-3"},
		{"tls", "cert", "create", "-client", "-dc", datacenter, "-days", "365"},
	}
	for _, s := range steps {
		if _, err := consulCmd(ctx, consul, d.ca, s...); err != nil {
			return err
		}
	}
	key, err := consulCmd(ctx, consul, d.ca, "keygen")
	if err != nil {
		return err
	}
	t := tokens{Management: uuid(), Roles: map[string]token{}}
	for _, r := range roles {
		t.Roles[r] = token{Accessor: uuid(), Secret: uuid()}
	}
	copies := map[string]string{
		"consul-agent-ca.pem": d.server + "/ca.pem", datacenter + "-server-consul-0.pem": d.server + "/server.pem",
		datacenter + "-server-consul-0-key.pem": d.server + "/server-key.pem",
	}
	for from, to := range copies {
		if err := copyFile(filepath.Join(d.ca, from), to); err != nil {
			return err
		}
	}
	copies = map[string]string{
		"consul-agent-ca.pem": d.client + "/ca.pem", datacenter + "-client-consul-0.pem": d.client + "/client.pem",
		datacenter + "-client-consul-0-key.pem": d.client + "/client-key.pem",
	}
	for from, to := range copies {
		if err := copyFile(filepath.Join(d.ca, from), to); err != nil {
			return err
		}
	}
	// Agents read every .hcl in their directory (-config-dir), merging blocks
	// across files; one file cannot repeat a block.
	files := map[string]string{
		filepath.Join(d.server, "common.hcl"): common(strings.TrimSpace(key), t), filepath.Join(d.server, "server.hcl"): serverConfig(t),
		filepath.Join(d.client, "common.hcl"): common(strings.TrimSpace(key), t), filepath.Join(d.client, "client.hcl"): clientConfig(),
	}
	for path, content := range files {
		if err := writeFile(path, content); err != nil {
			return err
		}
	}
	for _, r := range roles[1:] {
		if err := os.MkdirAll(d.tokenDir(r), 0o700); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(d.tokenDir(r), "token"), t.Roles[r].Secret+"\n"); err != nil {
			return err
		}
	}
	b, _ := json.MarshalIndent(t, "", "  ")
	if err := writeFile(filepath.Join(d.ca, "tokens.json"), string(b)); err != nil {
		return err
	}
	if err := writeFile(done, ""); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "made the CA, server and client certificates, the gossip key and the ACL token ids")
	return nil
}

// common is what every agent's configuration shares: gossip encryption, TLS on
// the servers' RPC with hostname verification, ACLs denying by default.
func common(key string, t tokens) string {
	return fmt.Sprintf(`datacenter = %q
data_dir = "/data"
encrypt = %q
encrypt_verify_incoming = true
encrypt_verify_outgoing = true
retry_join = ["server-1", "server-2", "server-3"]
acl {
  enabled = true
  default_policy = "deny"
  # With the servers out of reach an agent keeps the policies it has cached.
  down_policy = "extend-cache"
  tokens {
    agent = %q
  }
}
`, datacenter, key, t.Roles["agent"].Secret)
}

func serverConfig(t tokens) string {
	return fmt.Sprintf(`server = true
bootstrap_expect = 3
acl {
  tokens {
    initial_management = %q
  }
}
# The API in plain HTTP only on loopback (the health check); others use HTTPS.
addresses {
  http = "127.0.0.1"
  https = "0.0.0.0"
}
ports {
  https = 8501
  grpc = -1
  dns = -1
}
tls {
  defaults {
    ca_file = "/secrets/server/ca.pem"
    cert_file = "/secrets/server/server.pem"
    key_file = "/secrets/server/server-key.pem"
    verify_incoming = true
    verify_outgoing = true
  }
  internal_rpc {
    verify_server_hostname = true
  }
  https {
    verify_incoming = false
  }
}
`, t.Management)
}

func clientConfig() string {
	return `ports {
  grpc = -1
  dns = -1
}
tls {
  defaults {
    ca_file = "/secrets/client/ca.pem"
    cert_file = "/secrets/client/client.pem"
    key_file = "/secrets/client/client-key.pem"
    verify_outgoing = true
  }
  internal_rpc {
    verify_server_hostname = true
  }
}
`
}

func consulCmd(ctx context.Context, consul, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, consul, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("consul %s: %w: %s", strings.Join(args, " "), err, ee.Stderr)
		}
		return "", fmt.Errorf("consul %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return writeFile(to, string(b))
}

// writeFile writes a file only its owner reads: every container runs as nobody.
func writeFile(path, content string) error {
	return os.WriteFile(path, []byte(content), 0o600)
}

func uuid() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
