package admin

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tandem-serve/tandem/kvcache/blockhash"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/services/modelcard"
)

// callTimeout bounds each operator call.
const callTimeout = 10 * time.Second

// Health asks addr's grpc.health.v1 for service ("" is the whole server), waiting
// at most timeout for an answer.
func Health(ctx context.Context, addr, service string, timeout time.Duration,
	creds credentials.TransportCredentials) (healthpb.HealthCheckResponse_ServingStatus, error) {
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

// Drain takes the worker behind cc out of rotation (health NOT_SERVING) without
// stopping it, or with undo puts it back, and says so on w.
func Drain(ctx context.Context, cc grpc.ClientConnInterface, addr string, undo bool, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if _, err := workerv1.NewWorkerServiceClient(cc).Drain(ctx, &workerv1.DrainRequest{Serving: undo}); err != nil {
		return fmt.Errorf("drain %s: %w", addr, err)
	}
	if undo {
		fmt.Fprintf(w, "%s: SERVING again\n", addr)
	} else {
		fmt.Fprintf(w, "%s: NOT_SERVING; in-flight requests finish, discovery stops sending more\n", addr)
	}
	return nil
}

// Workers lists on w the workers the router behind cc can route to, as it sees
// them now: what an operator checks after a drain, or when a worker seems to get
// no traffic.
func Workers(ctx context.Context, cc grpc.ClientConnInterface, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := routerv1.NewRouterServiceClient(cc).ListWorkers(ctx, &routerv1.ListWorkersRequest{})
	if err != nil {
		return fmt.Errorf("workers: %w", err)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tMODE\tADDRESS\tSTATE")
	for _, wk := range resp.GetWorkers() {
		state := "serving"
		switch {
		case wk.GetUnavailable() != "":
			state = "unavailable: " + wk.GetUnavailable()
		case wk.GetDraining():
			state = "draining"
		}
		mode := strings.ToLower(strings.TrimPrefix(wk.GetMode().String(), "WORKER_MODE_"))
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", wk.GetId(), mode, wk.GetAddress(), state)
	}
	return tw.Flush()
}

// Route asks the router behind cc where text would go and why, without running
// it, and prints the answer on w: the decode worker, the ranked prefill workers,
// and with explain every candidate's cost terms. The text is tokenized as the
// frontend tokenizes a completion's prompt, with the model card's tokenizer (from
// a worker the router lists, dialled with dial), so its blocks hash the same.
func Route(ctx context.Context, cc grpc.ClientConnInterface, dial func(string) (*grpc.ClientConn, error), text string, explain bool,
	w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	card, err := modelcard.FromRouter(ctx, cc, dial)
	if err != nil {
		return fmt.Errorf("route: %w", err)
	}
	tok, err := modelcard.Tokenizer(card)
	if err != nil {
		return fmt.Errorf("route: %w", err)
	}
	ids := tok.Encode(text)
	if bos, ok := tok.BOS(); ok && tok.AddBOS() {
		ids = append([]uint32{bos}, ids...)
	}
	blockSize := int(card.GetBlockSize())
	resp, err := routerv1.NewRouterServiceClient(cc).Route(ctx, &routerv1.RouteRequest{
		RequestId: "tandem-route", PromptTokens: uint32(len(ids)), BlockHashes: blockhash.Hash(ids, blockSize),
		BlockSize: uint32(blockSize), Explain: explain, ModelFingerprint: card.GetFingerprint(),
	})
	if err != nil {
		return fmt.Errorf("route: %w", err)
	}
	fmt.Fprintf(w, "model %s: prompt of %d tokens, %d full blocks\n", card.GetModel(), len(ids), len(ids)/blockSize)
	fmt.Fprintf(w, "decode worker: %s (%s) with %d blocks cached\n", resp.GetDecodeWorker().GetId(), resp.GetDecodeWorker().GetAddress(),
		resp.GetDecodeCachedBlocks())
	fmt.Fprintf(w, "why: %s\n", resp.GetReason())
	for i, p := range resp.GetPrefillWorkers() {
		fmt.Fprintf(w, "prefill #%d: %s cached %d blocks, %d tokens queued, cost %.1f\n", i+1, p.GetWorker().GetId(), p.GetCachedBlocks(),
			p.GetQueuedTokens(), p.GetCost())
	}
	e := resp.GetExplanation()
	if e == nil {
		return nil
	}
	fmt.Fprintf(w, "\neffective %d tokens, threshold %d, class %s, temperature %g\n", e.GetEffectiveTokens(), e.GetIslThreshold(), e.GetGateClass(),
		e.GetTemperature())
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
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
	return tw.Flush()
}
