package workersvc

import (
	"context"
	"flag"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/engine/sim"
	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	"github.com/tandem-serve/tandem/proto/tandem/decode/v1/decodev1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// A decode worker's admission refusal reaches the client naming the flag that
// sets the limit (decode itself names its Config field), with its code kept.
func TestRefusalNamesTheFlag(t *testing.T) {
	// One worker per protocol: a cancelled holder leaves its slot a moment later.
	for _, proto := range []connect.ClientOption{connect.WithGRPC(), connect.WithProtoJSON()} {
		eng, err := sim.New(sim.DefaultConfig()) // modelled time: the holder decodes for seconds
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = eng.Close() })
		p := decode.DefaultParams()
		p.Policy = decode.PolicyAlwaysLocal
		cfg := decode.DefaultConfig()
		cfg.WorkerID, cfg.Mode, cfg.Params, cfg.MaxRunning = "d1", workerv1.WorkerMode_WORKER_MODE_AGGREGATED, p, 1
		svc, err := decode.New(cfg, eng, nil, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.Handle(decodeHandler(svc, nil))
		client := decodev1connect.NewDecodeServiceClient(rpctest.Client(t), rpctest.NewServer(t, mux).URL, proto)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		holder, err := client.Generate(ctx, connect.NewRequest(&decodev1.GenerateRequest{
			RequestId: "holder", PromptTokenIds: []uint32{1, 2, 3, 4}, MaxTokens: 5000}))
		if err != nil || !holder.Receive() {
			t.Fatalf("holder: %v %v", err, holder.Err())
		}
		s, err := client.Generate(ctx, connect.NewRequest(&decodev1.GenerateRequest{RequestId: "r", PromptTokenIds: []uint32{5, 6}, MaxTokens: 2}))
		if err == nil {
			for s.Receive() {
			}
			err = s.Err()
		}
		if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "at capacity, 1 requests (--max-running-requests 1)") ||
			strings.Contains(err.Error(), "MaxRunning") {
			t.Errorf("second request at MaxRunning 1: %v, want ResourceExhausted naming --max-running-requests", err)
		}
		cancel()
		holder.Close()
	}
}

// Every limit a refusal can name is a flag the worker registers.
func TestLimitFlagsAreRegistered(t *testing.T) {
	var cfg Config
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	cfg.RegisterFlags(fs, "decode")
	for reason, name := range limitFlags {
		if fs.Lookup(name) == nil {
			t.Errorf("refusal %s names --%s, which is not a flag", reason, name)
		}
	}
}
