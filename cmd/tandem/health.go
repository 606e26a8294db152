package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/credentials"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func runHealth(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("health", "health ADDR [--service NAME] [--timeout D]", stderr)
	service := fs.String("service", "", "service name to check (default: the whole server)")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for an answer")
	var tc clientTLS
	tc.RegisterFlags(fs)
	// Flags may come after the address, as in 'tandem health :8080 --service x'.
	var addr string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		addr, args = args[0], args[1:]
	}
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
	creds, err := tc.creds()
	if err != nil {
		return err
	}
	st, err := checkHealthWith(ctx, addr, *service, *timeout, creds)
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

func checkHealth(ctx context.Context, addr, service string, timeout time.Duration) (healthpb.HealthCheckResponse_ServingStatus, error) {
	return checkHealthWith(ctx, addr, service, timeout, insecure.NewCredentials())
}

func checkHealthWith(ctx context.Context, addr, service string, timeout time.Duration, creds credentials.TransportCredentials) (healthpb.HealthCheckResponse_ServingStatus, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return 0, err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return 0, err
	}
	return resp.GetStatus(), nil
}
