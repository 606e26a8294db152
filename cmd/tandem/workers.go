package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
)

// runWorkers lists the workers a router can route to, as it sees them now: what
// an operator checks after tandem drain, or when a worker seems to get no traffic.
func runWorkers(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("workers", "workers --router ADDR", stderr)
	var tc clientTLS
	tc.RegisterFlags(fs)
	routerAddr := fs.String("router", "127.0.0.1:9001", "router address")
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	cc, err := tc.dial(*routerAddr)
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := routerv1.NewRouterServiceClient(cc).ListWorkers(ctx, &routerv1.ListWorkersRequest{})
	if err != nil {
		return fmt.Errorf("workers: %w", err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tMODE\tADDRESS\tSTATE")
	for _, w := range resp.GetWorkers() {
		state := "serving"
		if w.GetDraining() {
			state = "draining"
		}
		mode := strings.ToLower(strings.TrimPrefix(w.GetMode().String(), "WORKER_MODE_"))
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", w.GetId(), mode, w.GetAddress(), state)
	}
	return tw.Flush()
}
