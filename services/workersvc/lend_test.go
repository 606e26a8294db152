package workersvc

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/services/consul"
	"github.com/tandem-serve/tandem/services/discovery"
)

// generated is what one Generate returned.
type generated struct {
	tokens   []uint32
	decision *decodev1.PrefillDecision
}

// generateOn runs one request on the worker at addr over gRPC, naming prefill
// the prefill candidates as the router's reply would.
func generateOn(t *testing.T, addr, id string, prompt []uint32, prefill ...string) generated {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := &decodev1.GenerateRequest{RequestId: id, PromptTokenIds: prompt, MaxTokens: 16,
		Sampling: &workerv1.SamplingParams{Temperature: 0.8, TopP: 0.9, Seed: 7}}
	for _, p := range prefill {
		req.PrefillWorkers = append(req.PrefillWorkers, &decodev1.PrefillCandidate{WorkerId: p})
	}
	stream, err := decodev1.NewDecodeServiceClient(cc).Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var out generated
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if msg.GetPrefill() != nil {
			out.decision = msg.GetPrefill()
		}
		out.tokens = append(out.tokens, msg.GetTokenIds()...)
	}
}

// A decode worker with no prefill worker at all hands a long prompt to an
// aggregated worker started with --lend-prefill, over real sockets (its KV
// transfer port), and gets the tokens a local prefill gives; the lender still
// serves its own requests. An aggregated worker without the flag is never
// called: the request is prefilled locally, with the same tokens.
func TestDecodeWorkerPrefillsOnALender(t *testing.T) {
	lender := startTestWorker(t, "aggregated", "--id", "lender", "--lend-prefill")
	plain := startTestWorker(t, "aggregated", "--id", "plain")
	if info := lender.worker.WorkerInfo(); !info.GetLendsPrefill() || info.GetKvTransferPort() == 0 || lender.KVAddr() == "" {
		t.Fatalf("lender's WorkerInfo %v: want lends_prefill and a KV transfer port", info)
	}
	if info := plain.worker.WorkerInfo(); info.GetLendsPrefill() || info.GetKvTransferPort() != 0 {
		t.Fatalf("plain aggregated worker's WorkerInfo %v: lends nothing", info)
	}
	dec := startTestWorker(t, "decode", "--id", "dec", "--policy", "threshold", "--short-prefill-threshold", "16",
		"--prefill-workers", lender.Addr()+","+plain.Addr())
	deadline := time.Now().Add(20 * time.Second)
	for !dec.peersKnown() {
		if time.Now().After(deadline) {
			t.Fatalf("decode worker does not know its peers; awaiting %v", dec.dir.Awaiting())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ids := dec.prefill.IDs(); !slices.Equal(ids, []string{"lender"}) {
		t.Fatalf("prefill candidates %v, want the lender only", ids)
	}

	prompt := make([]uint32, 300)
	for i := range prompt {
		prompt[i] = uint32(i*7919) % 1000
	}
	want := generateOn(t, plain.Addr(), "local", prompt)
	if len(want.tokens) == 0 {
		t.Fatal("no tokens from the local prefill")
	}

	remote := generateOn(t, dec.Addr(), "remote", prompt, "lender")
	if d := remote.decision; d.GetPath() != decodev1.PrefillPath_PREFILL_PATH_REMOTE || d.GetPrefillWorkerId() != "lender" {
		t.Fatalf("decision %v, want remote on the lender", d)
	}
	if !slices.Equal(remote.tokens, want.tokens) {
		t.Errorf("tokens prefilled on the lender %v, local %v", remote.tokens, want.tokens)
	}

	own := generateOn(t, lender.Addr(), "own", prompt)
	if own.decision.GetPath() != decodev1.PrefillPath_PREFILL_PATH_LOCAL || !slices.Equal(own.tokens, want.tokens) {
		t.Errorf("the lender's own request: decision %v tokens %v, want local with %v", own.decision, own.tokens, want.tokens)
	}

	other := generateOn(t, dec.Addr(), "not-a-lender", prompt, "plain")
	if other.decision.GetPath() == decodev1.PrefillPath_PREFILL_PATH_REMOTE {
		t.Fatalf("decision %v: an aggregated worker without --lend-prefill was called", other.decision)
	}
	if !slices.Equal(other.tokens, want.tokens) {
		t.Errorf("tokens after falling back %v, local %v", other.tokens, want.tokens)
	}
}

func TestLendPrefillOnlyForAggregatedWorkers(t *testing.T) {
	for _, args := range [][]string{
		{"--mode", "decode", "--lend-prefill"},
		{"--mode", "prefill", "--lend-prefill"},
		{"--mode", "aggregated", "--kv-listen", "127.0.0.1:0"},
	} {
		var cfg Config
		fs := newFlagSet(&cfg)
		if err := fs.Parse(append([]string{"--engine", "sim"}, args...)); err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
	var cfg Config
	fs := newFlagSet(&cfg)
	if err := fs.Parse([]string{"--engine", "sim", "--mode", "aggregated", "--lend-prefill", "--kv-listen", "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("aggregated with --lend-prefill and --kv-listen: %v", err)
	}
}

func newFlagSet(cfg *Config) *flag.FlagSet {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	cfg.RegisterFlags(fs, "decode")
	return fs
}

// A lender found in Consul under the prefill service is known by its worker id
// (the id the router names it by, not its registration's) as an aggregated
// worker that lends, and decode workers may call it.
func TestLenderFromConsul(t *testing.T) {
	is := instances([]consul.Instance{
		{ID: "p1", Addr: "10.0.0.1:9000", Meta: map[string]string{"kv_transfer_port": "9001"}},
		{ID: "agg-1" + lenderSuffix, Addr: "10.0.0.2:9000", Meta: map[string]string{"kv_transfer_port": "9003", "lends_prefill": "true", "worker_id": "agg-1"}},
	})
	if is[1].ID != "agg-1" || !is[1].LendsPrefill || is[0].LendsPrefill || is[0].ID != "p1" {
		t.Fatalf("instances %+v", is)
	}
	d := discovery.NewDirectory(workerv1.WorkerMode_WORKER_MODE_PREFILL, nil, false, slog.New(slog.DiscardHandler))
	d.SetInstances(is)
	p := newPrefillers(d, nil, nil)
	if ids := p.IDs(); !slices.Equal(ids, []string{"agg-1", "p1"}) {
		t.Fatalf("prefill candidates %v", ids)
	}
	w, _ := d.ByID("agg-1")
	if w.Mode != workerv1.WorkerMode_WORKER_MODE_AGGREGATED || !w.LendsPrefill || w.KVAddress != "10.0.0.2:9003" {
		t.Errorf("lender as the directory knows it: %+v", w)
	}
}
