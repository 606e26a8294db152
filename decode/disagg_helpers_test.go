package decode_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/tandem-serve/tandem/decode"
	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/native"
	"github.com/tandem-serve/tandem/handoff"
	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	"github.com/tandem-serve/tandem/prefill"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	"github.com/tandem-serve/tandem/proto/tandem/decode/v1/decodev1connect"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
	"github.com/tandem-serve/tandem/proto/tandem/prefill/v1/prefillv1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/services/kvport"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newNative(t *testing.T) *native.Engine {
	t.Helper()
	return newNativeModel(t, "tiny")
}

// newNativeModel runs model (a random shape, stories260K or a GGUF path).
func newNativeModel(t *testing.T, model string) *native.Engine {
	t.Helper()
	e, err := native.New(native.Config{Model: model, Seed: 7, NumBlocks: 256, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// prefillNode is a prefill worker served over real HTTP/2, and a grpc-go client to it.
type prefillNode struct {
	eng    engine.Engine
	srv    *httptest.Server
	client handoff.Client
}

func startPrefill(t *testing.T, eng engine.Engine, id string) *prefillNode {
	t.Helper()
	svc, err := prefill.New(prefill.Config{WorkerID: id, ChunkBytes: 64 << 10, MaxLease: 30 * time.Second}, eng, quietLog(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(prefillv1connect.NewPrefillServiceHandler(svc))
	srv := rpctest.NewServer(t, mux)
	return &prefillNode{eng: eng, srv: srv, client: grpcPrefillClient(t, srv.Listener.Addr().String())}
}

func grpcPrefillClient(t *testing.T, addr string) handoff.Client {
	t.Helper()
	return handoff.GRPCClient(rpctest.Dial(t, addr))
}

// staticPrefillers is discovery as a fixed map; a test can change it.
type staticPrefillers struct {
	mu      sync.Mutex
	clients map[string]handoff.Client
	order   []string
}

func (p *staticPrefillers) add(id string, c handoff.Client) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.clients == nil {
		p.clients = map[string]handoff.Client{}
	}
	p.clients[id] = c
	p.order = append(p.order, id)
}

func (p *staticPrefillers) Client(id string) (handoff.Client, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.clients[id]
	return c, ok
}

func (p *staticPrefillers) Failed(string) {}

func (p *staticPrefillers) IDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.order...)
}

// decodeNode is a decode worker served over real HTTP/2 with a Connect client.
type decodeNode struct {
	eng    engine.Engine
	svc    *decode.Service
	client decodev1connect.DecodeServiceClient
	reg    *prometheus.Registry
}

func startDecode(t *testing.T, eng engine.Engine, pf decode.Prefillers, p decode.Params, minDL, maxDL time.Duration) *decodeNode {
	t.Helper()
	return startDecodeWith(t, eng, pf, p, minDL, maxDL, nil)
}

// startDecodeWith is startDecode with the config changed by mod, if not nil.
func startDecodeWith(t *testing.T, eng engine.Engine, pf decode.Prefillers, p decode.Params, minDL, maxDL time.Duration,
	mod func(*decode.Config)) *decodeNode {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := decode.Config{
		WorkerID: "decode-test", Mode: workerv1.WorkerMode_WORKER_MODE_DECODE, Params: p,
		MinRemoteDeadline: minDL, MaxRemoteDeadline: maxDL,
	}
	if mod != nil {
		mod(&cfg)
	}
	svc, err := decode.New(cfg, eng, pf, quietLog(), reg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(decodev1connect.NewDecodeServiceHandler(svc))
	srv := rpctest.NewServer(t, mux)
	return &decodeNode{eng: eng, svc: svc, client: decodev1connect.NewDecodeServiceClient(rpctest.Client(t), srv.URL, connect.WithGRPC()), reg: reg}
}

// result is what a client of Generate sees.
type result struct {
	tokens   []uint32
	logprobs []*workerv1.TokenLogprobs
	decision *decodev1.PrefillDecision
	finish   decodev1.FinishReason
	usage    *decodev1.Usage
}

func generate(t *testing.T, ctx context.Context, c decodev1connect.DecodeServiceClient, req *decodev1.GenerateRequest) (result, error) {
	t.Helper()
	stream, err := c.Generate(ctx, connect.NewRequest(req))
	if err != nil {
		return result{}, err
	}
	defer stream.Close()
	var r result
	for stream.Receive() {
		m := stream.Msg()
		r.tokens = append(r.tokens, m.GetTokenIds()...)
		r.logprobs = append(r.logprobs, m.GetLogprobs()...)
		if m.GetPrefill() != nil {
			r.decision = m.GetPrefill()
		}
		if m.GetFinishReason() != decodev1.FinishReason_FINISH_REASON_UNSPECIFIED {
			r.finish, r.usage = m.GetFinishReason(), m.GetUsage()
		}
	}
	return r, stream.Err()
}

// waitIdle polls until eng holds no active blocks, failing after a bounded wait.
func waitIdle(t *testing.T, name string, eng engine.Engine) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := eng.Stats()
		if st.ActiveBlocks == 0 && st.Running == 0 && st.Waiting == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still holds %d active blocks (%d running, %d waiting)", name, st.ActiveBlocks, st.Running, st.Waiting)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cutProxy forwards TCP to target, and after limit bytes from the server closes
// both sides: a connection that dies mid-transfer.
func cutProxy(t *testing.T, target string, limit int64) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer s.Close()
				go func() { _, _ = io.Copy(s, c) }()
				_, _ = io.CopyN(c, s, limit)
			}()
		}
	}()
	return ln.Addr().String()
}

// serveKV serves svc on a KV transfer port, as a prefill worker does
// (services/workersvc), until stop, which waits for Serve to return and may be
// called more than once.
func serveKV(svc *prefill.Service) (addr string, stop func(), err error) {
	ks, err := kvport.New(kvport.Config{Addr: "127.0.0.1:0", Grace: time.Second, Logger: quietLog()}, func(r grpc.ServiceRegistrar) {
		prefillv1.RegisterPrefillServiceServer(r, svc.GRPC())
	})
	if err != nil {
		return "", nil, err
	}
	ks.SetServing(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = ks.Serve(ctx); close(done) }()
	return ks.Addr(), sync.OnceFunc(func() { cancel(); <-done }), nil
}
