// Command tandem-consul-init sets up the Consul cluster of the multi-host compose
// deployment (compose/multihost.yaml), in two steps that run as one-shot
// containers:
//
//	tandem-consul-init secrets DIR   # before any agent: CA and certificates (consul tls),
//	                                  # gossip key (consul keygen), ACL token ids, agent configs
//	tandem-consul-init acl DIR       # once the servers have a leader: policies and tokens
//
// Nothing it writes is committed anywhere: every key and token is generated here,
// into the deployment's volumes. Both steps may run again: secrets keeps what it
// made (DIR/ca/.done), acl updates policies and tokens in place.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tandem-consul-init:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) != 2 {
		return fmt.Errorf("usage: tandem-consul-init secrets|acl DIR")
	}
	consul := getenv("CONSUL_BIN")
	if consul == "" {
		consul = "/consul"
	}
	l := layout(args[1])
	switch args[0] {
	case "secrets":
		return makeSecrets(ctx, l, consul, stdout)
	case "acl":
		return applyACL(ctx, l, getenv("TANDEM_CONSUL_SERVERS"), stdout)
	}
	return fmt.Errorf("%q: want secrets or acl", args[0])
}
