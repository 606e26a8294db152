package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// runDrain takes a worker out of rotation, or puts it back, without stopping it.
func runDrain(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("drain", "drain ADDR [--undo]", stderr)
	undo := fs.Bool("undo", false, "put the worker back in rotation")
	var tc clientTLS
	tc.RegisterFlags(fs)
	var addr string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		addr, args = args[0], args[1:]
	}
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	if addr == "" {
		fs.Usage()
		return errors.New("drain: a worker address is required")
	}
	cc, err := tc.dial(addr)
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := workerv1.NewWorkerServiceClient(cc).Drain(ctx, &workerv1.DrainRequest{Serving: *undo}); err != nil {
		return fmt.Errorf("drain %s: %w", addr, err)
	}
	if *undo {
		fmt.Fprintf(stdout, "%s: SERVING again\n", addr)
	} else {
		fmt.Fprintf(stdout, "%s: NOT_SERVING; in-flight requests finish, discovery stops sending more\n", addr)
	}
	return nil
}
