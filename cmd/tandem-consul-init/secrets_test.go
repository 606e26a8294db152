package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeConsul stands in for the consul binary: it writes the files `consul tls`
// names into its working directory and prints a key for `consul keygen`.
const fakeConsul = `#!/bin/sh
case "$1 $2" in
"tls ca") echo ca >consul-agent-ca.pem; echo cakey >consul-agent-ca-key.pem ;;
"tls cert")
  case "$4" in
  -server) echo s >dc1-server-consul-0.pem; echo sk >dc1-server-consul-0-key.pem ;;
  -client) echo c >dc1-client-consul-0.pem; echo ck >dc1-client-consul-0-key.pem ;;
  esac ;;
"keygen ") echo "a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2U=" ;;
*) echo "unexpected: $*" >&2; exit 1 ;;
esac
`

// The setup writes each role's token into its own volume, the CA's key into
// none an agent mounts, every file readable by its owner alone, and keeps it all
// on a second run.
func TestSecretsLayout(t *testing.T) {
	dir := t.TempDir()
	consul := filepath.Join(t.TempDir(), "consul")
	if err := os.WriteFile(consul, []byte(fakeConsul), 0o755); err != nil {
		t.Fatal(err)
	}
	d := layout(dir)
	if err := makeSecrets(context.Background(), d, consul, io.Discard); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(d.ca, "tokens.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tok tokens
	if err := json.Unmarshal(b, &tok); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{tok.Management: true}
	for _, r := range roles {
		if seen[tok.Roles[r].Secret] || len(tok.Roles[r].Secret) != 36 {
			t.Errorf("role %s's secret %q is a repeat or not a UUID", r, tok.Roles[r].Secret)
		}
		seen[tok.Roles[r].Secret] = true
		if r == "agent" {
			continue
		}
		got, err := os.ReadFile(filepath.Join(d.tokenDir(r), "token"))
		if err != nil || strings.TrimSpace(string(got)) != tok.Roles[r].Secret {
			t.Errorf("token-%s/token = %q, %v; want the %s secret", r, got, err, r)
		}
	}
	for _, agentDir := range []string{d.server, d.client} {
		entries, _ := os.ReadDir(agentDir)
		for _, e := range entries {
			info, _ := e.Info()
			if info.Mode().Perm() != 0o600 {
				t.Errorf("%s is %v, want 0600", e.Name(), info.Mode().Perm())
			}
			b, _ := os.ReadFile(filepath.Join(agentDir, e.Name()))
			if strings.Contains(string(b), "cakey") {
				t.Errorf("%s holds the CA's key", filepath.Join(agentDir, e.Name()))
			}
			if strings.Contains(string(b), tok.Roles["operator"].Secret) {
				t.Errorf("%s holds the operator's token", filepath.Join(agentDir, e.Name()))
			}
		}
	}
	server, _ := os.ReadFile(filepath.Join(d.server, "server.hcl"))
	client, _ := os.ReadFile(filepath.Join(d.client, "client.hcl"))
	if !strings.Contains(string(server), tok.Management) || strings.Contains(string(client), tok.Management) {
		t.Error("the initial management token belongs in the servers' configuration alone")
	}

	if err := makeSecrets(context.Background(), d, "/nonexistent/consul", io.Discard); err != nil {
		t.Fatalf("a second run: %v", err)
	}
	again, _ := os.ReadFile(filepath.Join(d.ca, "tokens.json"))
	if string(again) != string(b) {
		t.Error("a second run changed the tokens")
	}
}
