package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tandem-serve/tandem/kvcache"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	"github.com/tandem-serve/tandem/tokenizer"
)

// runRoute asks a router where a prompt would go and why, without running it.
func runRoute(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("route", `route --router ADDR [--explain] "prompt text"`, stderr)
	var tc clientTLS
	tc.RegisterFlags(fs)
	routerAddr := fs.String("router", "127.0.0.1:9001", "router address")
	explain := fs.Bool("explain", true, "print every candidate's cost terms")
	blockSize := fs.Int("block-size", 16, "tokens per KV block; must match the router's")
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	text := strings.Join(fs.Args(), " ")
	if text == "" {
		fs.Usage()
		return errors.New("route: a prompt is required")
	}
	tok, err := tokenizer.CL100K()
	if err != nil {
		return err
	}
	ids := tok.Encode(text)
	cc, err := tc.dial(*routerAddr)
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := routerv1.NewRouterServiceClient(cc).Route(ctx, &routerv1.RouteRequest{
		RequestId: "tandem-route", PromptTokens: uint32(len(ids)), BlockHashes: kvcache.HashBlocks(ids, *blockSize),
		BlockSize: uint32(*blockSize), Explain: *explain,
	})
	if err != nil {
		return fmt.Errorf("route: %w", err)
	}
	fmt.Fprintf(stdout, "prompt: %d tokens, %d full blocks\n", len(ids), len(ids) / *blockSize)
	fmt.Fprintf(stdout, "decode worker: %s (%s) with %d blocks cached\n", resp.GetDecodeWorker().GetId(), resp.GetDecodeWorker().GetAddress(), resp.GetDecodeCachedBlocks())
	fmt.Fprintf(stdout, "why: %s\n", resp.GetReason())
	for i, p := range resp.GetPrefillWorkers() {
		fmt.Fprintf(stdout, "prefill #%d: %s cached %d blocks, %d tokens queued, cost %.1f\n", i+1, p.GetWorker().GetId(), p.GetCachedBlocks(), p.GetQueuedTokens(), p.GetCost())
	}
	if e := resp.GetExplanation(); e != nil {
		fmt.Fprintf(stdout, "\neffective %d tokens, threshold %d, class %s, temperature %g\n", e.GetEffectiveTokens(), e.GetIslThreshold(), e.GetGateClass(), e.GetTemperature())
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "\tWORKER\tMODE\tCACHED\tUNCACHED\tPREFILL\tDECODE\tQUEUE\tCOST\tNOTE")
		for _, c := range e.GetCandidates() {
			mark := ""
			if c.GetChosen() {
				mark = "*"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%s\n", mark, c.GetWorker().GetId(),
				strings.TrimPrefix(c.GetWorker().GetMode().String(), "WORKER_MODE_"), c.GetCachedBlocks(), c.GetUncachedBlocks(),
				c.GetPrefillTerm(), c.GetDecodeTerm(), c.GetQueueTerm(), c.GetCost(), c.GetNote())
		}
		tw.Flush()
	}
	return nil
}
