package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tandem-serve/tandem/services/admin"
)

// leadingAddr takes an address given before the flags, as in 'tandem health :8080
// --service x'.
func leadingAddr(args []string) (string, []string) {
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		return args[0], args[1:]
	}
	return "", args
}

func runHealth(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("health", "health ADDR [--service NAME] [--timeout D]", stderr)
	service := fs.String("service", "", "service name to check (default: the whole server)")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for an answer")
	var tc admin.ClientTLS
	tc.RegisterFlags(fs)
	addr, args := leadingAddr(args)
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	if addr == "" && fs.NArg() > 0 {
		addr = fs.Arg(0)
	}
	if addr == "" {
		fs.Usage()
		return errors.New("health: an address is required")
	}
	creds, err := tc.Creds()
	if err != nil {
		return err
	}
	st, err := admin.Health(ctx, addr, *service, *timeout, creds)
	if err != nil {
		fmt.Fprintf(stdout, "%s: %v\n", addr, err)
		return exitCode(2)
	}
	fmt.Fprintf(stdout, "%s: %s\n", addr, st)
	if st != healthpb.HealthCheckResponse_SERVING {
		return exitCode(1)
	}
	return nil
}

// runDrain takes a worker out of rotation, or puts it back, without stopping it.
func runDrain(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("drain", "drain ADDR [--undo]", stderr)
	undo := fs.Bool("undo", false, "put the worker back in rotation")
	var tc admin.ClientTLS
	tc.RegisterFlags(fs)
	addr, args := leadingAddr(args)
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	if addr == "" {
		fs.Usage()
		return errors.New("drain: a worker address is required")
	}
	cc, err := tc.Dial(addr)
	if err != nil {
		return err
	}
	defer cc.Close()
	return admin.Drain(ctx, cc, addr, *undo, stdout)
}

// runRoute asks a router where a prompt would go and why, without running it.
func runRoute(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("route", `route --router ADDR [--explain] "prompt text"`, stderr)
	var tc admin.ClientTLS
	tc.RegisterFlags(fs)
	routerAddr := fs.String("router", "127.0.0.1:9001", "router address")
	explain := fs.Bool("explain", true, "print every candidate's cost terms")
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	text := strings.Join(fs.Args(), " ")
	if text == "" {
		fs.Usage()
		return errors.New("route: a prompt is required")
	}
	cc, err := tc.Dial(*routerAddr)
	if err != nil {
		return err
	}
	defer cc.Close()
	return admin.Route(ctx, cc, tc.Dial, text, *explain, stdout)
}

// runWorkers lists the workers a router can route to, as it sees them now.
func runWorkers(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("workers", "workers --router ADDR", stderr)
	var tc admin.ClientTLS
	tc.RegisterFlags(fs)
	routerAddr := fs.String("router", "127.0.0.1:9001", "router address")
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	cc, err := tc.Dial(*routerAddr)
	if err != nil {
		return err
	}
	defer cc.Close()
	return admin.Workers(ctx, cc, stdout)
}

// runConfig reads and writes the runtime policy in Consul KV, checking a new value
// the way the services will before it is written.
func runConfig(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("config", `config get|set router|decode|planner ['{"field": value, ...}']`, stderr)
	consulAddr := fs.String("consul", "127.0.0.1:8500", "Consul agent HTTP address")
	tokenFile := fs.String("consul-token-file", "",
		"file holding the Consul ACL token, one that may write tandem/config/ for set (default: CONSUL_HTTP_TOKEN_FILE or CONSUL_HTTP_TOKEN)")
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	if e := getenv("CONSUL_HTTP_ADDR"); e != "" && !flagGiven(fs, "consul") && getenv("TANDEM_CONSUL") == "" {
		*consulAddr = strings.TrimPrefix(e, "http://")
	}
	if fs.NArg() < 2 {
		fs.Usage()
		return errors.New("config: want get or set, and router, decode or planner")
	}
	switch op, which := fs.Arg(0), fs.Arg(1); op {
	case "get":
		return admin.GetPolicy(ctx, *consulAddr, *tokenFile, which, stdout)
	case "set":
		if fs.NArg() != 3 {
			return errors.New(`config set: want one JSON object, e.g. '{"short_prefill_threshold": 128}'`)
		}
		return admin.SetPolicy(ctx, *consulAddr, *tokenFile, which, []byte(fs.Arg(2)), stdout)
	default:
		return fmt.Errorf("config: %q: want get or set", op)
	}
}
