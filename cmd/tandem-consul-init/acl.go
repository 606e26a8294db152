package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// policies are the least each role needs, by what its code calls: the agent
// endpoints register and deregister its own service (service write), blocking
// health queries list the services it discovers (service and node read: the
// catalog filters out entries on nodes a token cannot read), and KV reads watch
// its runtime policy. The operator writes the runtime policies with tandem config.
var policies = map[string]string{
	"agent": `# Consul agents: register their node, read services for anti-entropy.
node_prefix "" { policy = "write" }
service_prefix "" { policy = "read" }`,
	"frontend": `service "tandem-frontend" { policy = "write" }
service "tandem-router" { policy = "read" }
node_prefix "" { policy = "read" }`,
	"router": `service "tandem-router" { policy = "write" }
service "tandem-decode" { policy = "read" }
service "tandem-prefill" { policy = "read" }
node_prefix "" { policy = "read" }
key "tandem/config/router" { policy = "read" }
key "tandem/config/planner" { policy = "read" }
key "tandem/planner/plan" { policy = "write" }`,
	"prefill": `service "tandem-prefill" { policy = "write" }`,
	"decode": `service "tandem-decode" { policy = "write" }
service "tandem-prefill" { policy = "read" }
node_prefix "" { policy = "read" }
key "tandem/config/decode" { policy = "read" }`,
	"operator": `key_prefix "tandem/config/" { policy = "write" }`,
}

func applyACL(ctx context.Context, d dirs, servers string, stdout io.Writer) error {
	b, err := os.ReadFile(filepath.Join(d.ca, "tokens.json"))
	if err != nil {
		return fmt.Errorf("run secrets first: %w", err)
	}
	var t tokens
	if err := json.Unmarshal(b, &t); err != nil {
		return fmt.Errorf("tokens.json: %w", err)
	}
	if servers == "" {
		servers = "server-1:8501,server-2:8501,server-3:8501"
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var last error
	for {
		for _, addr := range strings.Split(servers, ",") {
			if last = applyOn(ctx, addr, d, t); last == nil {
				fmt.Fprintf(stdout, "ACL policies and tokens for %v are in place (through %s)\n", roles, addr)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ACLs not applied in 3m: %w", last)
		case <-time.After(2 * time.Second):
		}
	}
}

// applyOn creates or updates every policy and token through the server at addr;
// it fails until the servers have a leader and the ACL system is up.
func applyOn(ctx context.Context, addr string, d dirs, t tokens) error {
	cfg := api.DefaultConfig()
	cfg.Address = addr
	cfg.Scheme = "https"
	cfg.TLSConfig.CAFile = filepath.Join(d.server, "ca.pem")
	cfg.Token = t.Management
	c, err := api.NewClient(cfg)
	if err != nil {
		return err
	}
	acl := c.ACL()
	w := (&api.WriteOptions{}).WithContext(ctx)
	q := (&api.QueryOptions{}).WithContext(ctx)
	for _, role := range roles {
		name := "tandem-" + role
		p := &api.ACLPolicy{Name: name, Description: "tandem's " + role + " role (compose/multihost.yaml)", Rules: policies[role]}
		old, _, err := acl.PolicyReadByName(name, q)
		if err != nil && !notFound(err) {
			return fmt.Errorf("read policy %s: %w", name, err)
		}
		if old != nil {
			p.ID = old.ID
			p, _, err = acl.PolicyUpdate(p, w)
		} else {
			p, _, err = acl.PolicyCreate(p, w)
		}
		if err != nil {
			return fmt.Errorf("policy %s: %w", name, err)
		}
		tok := &api.ACLToken{AccessorID: t.Roles[role].Accessor, SecretID: t.Roles[role].Secret, Description: name,
			Policies: []*api.ACLTokenPolicyLink{{ID: p.ID}}}
		had, _, err := acl.TokenRead(tok.AccessorID, q)
		if err != nil && !notFound(err) {
			return fmt.Errorf("read token %s: %w", name, err)
		}
		if had != nil {
			_, _, err = acl.TokenUpdate(tok, w)
		} else {
			_, _, err = acl.TokenCreate(tok, w)
		}
		if err != nil {
			return fmt.Errorf("token %s: %w", name, err)
		}
	}
	return nil
}

func notFound(err error) bool {
	var se api.StatusError
	return errors.As(err, &se) && se.Code == 404 || strings.Contains(err.Error(), "ACL not found")
}
