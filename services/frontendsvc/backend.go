package frontendsvc

import (
	"context"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandem-serve/tandem/frontend"
	"github.com/tandem-serve/tandem/kvcache"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	"github.com/tandem-serve/tandem/services/telemetry"
)

// backend asks the router where a request goes and runs it on that decode worker.
type backend struct {
	router routerv1.RouterServiceClient
	dial   func(addr string) (*grpc.ClientConn, error)
	// served is the model's fingerprint and block size, from its model card.
	served atomic.Pointer[servedModel]

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

var _ frontend.Backend = (*backend)(nil)

type servedModel struct {
	fingerprint string
	blockSize   int
}

func (b *backend) setModel(fingerprint string, blockSize int) {
	b.served.Store(&servedModel{fingerprint: fingerprint, blockSize: blockSize})
}

func (b *backend) conn(addr string) (*grpc.ClientConn, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cc, ok := b.conns[addr]; ok {
		return cc, nil
	}
	cc, err := b.dial(addr)
	if err != nil {
		return nil, err
	}
	b.conns[addr] = cc
	return cc, nil
}

func (b *backend) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, cc := range b.conns {
		_ = cc.Close()
	}
}

// Generate routes the request and starts it. A decode worker that cannot be reached,
// or is full, before it sends anything is excluded and the request routed once
// more, so a dead or busy worker costs a retry, not an error.
func (b *backend) Generate(ctx context.Context, req *decodev1.GenerateRequest) (frontend.TokenStream, *routerv1.RouteResponse, error) {
	ctx = telemetry.WithRequestID(ctx, req.GetRequestId())
	m := b.served.Load()
	if m == nil || m.blockSize <= 0 {
		return nil, nil, status.Error(codes.Unavailable, "no model card loaded yet")
	}
	rreq := &routerv1.RouteRequest{
		RequestId: req.GetRequestId(), PromptTokens: uint32(len(req.GetPromptTokenIds())),
		BlockHashes: kvcache.HashBlocks(req.GetPromptTokenIds(), m.blockSize), BlockSize: uint32(m.blockSize),
		Explain: req.GetExplain(), ModelFingerprint: m.fingerprint,
	}
	var lastErr error
	for attempt := 0; attempt < 2; attempt++ {
		route, err := b.router.Route(ctx, rreq)
		if err != nil {
			if status.Code(lastErr) == codes.ResourceExhausted && status.Code(err) == codes.Unavailable {
				// Nobody else to try: the full worker's own answer ("at capacity",
				// 429) says more than the router's "no decode worker is available".
				// (An unreachable worker's dial error is not for the client.)
				return nil, nil, lastErr
			}
			return nil, nil, err
		}
		s, err := b.start(ctx, route, req)
		if err == nil {
			return s, route, nil
		}
		// Unreachable or at capacity, before it took the request: another worker
		// may have room.
		if c := status.Code(err); c != codes.Unavailable && c != codes.ResourceExhausted {
			return nil, nil, err
		}
		lastErr = err
		rreq.ExcludeWorkerIds = append(rreq.ExcludeWorkerIds, route.GetDecodeWorker().GetId())
	}
	return nil, nil, lastErr
}

func (b *backend) start(ctx context.Context, route *routerv1.RouteResponse, req *decodev1.GenerateRequest) (*tokenStream, error) {
	cc, err := b.conn(route.GetDecodeWorker().GetAddress())
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	r := &decodev1.GenerateRequest{
		RequestId: req.GetRequestId(), PromptTokenIds: req.GetPromptTokenIds(), Sampling: req.GetSampling(),
		MaxTokens: req.GetMaxTokens(), StopTokenIds: req.GetStopTokenIds(), Explain: req.GetExplain(),
	}
	for _, p := range route.GetPrefillWorkers() {
		r.PrefillWorkers = append(r.PrefillWorkers, &decodev1.PrefillCandidate{
			WorkerId: p.GetWorker().GetId(), QueuedTokens: p.GetQueuedTokens(), CachedBlocks: p.GetCachedBlocks(),
			Cost: p.GetCost(), QueueCostPerToken: p.GetQueueCostPerToken(),
		})
	}
	sctx, cancel := context.WithCancel(ctx)
	stream, err := decodev1.NewDecodeServiceClient(cc).Generate(sctx, r)
	if err != nil {
		cancel()
		return nil, err
	}
	// The first message proves the worker took the request; until then a failure
	// is safe to retry elsewhere.
	first, err := stream.Recv()
	if err != nil {
		cancel()
		return nil, err
	}
	return &tokenStream{stream: stream, first: first, cancel: cancel}, nil
}

type tokenStream struct {
	stream grpc.ServerStreamingClient[decodev1.GenerateResponse]
	first  *decodev1.GenerateResponse
	cancel context.CancelFunc
}

func (t *tokenStream) Recv() (*decodev1.GenerateResponse, error) {
	if f := t.first; f != nil {
		t.first = nil
		return f, nil
	}
	return t.stream.Recv()
}

func (t *tokenStream) Close() error {
	t.cancel()
	return nil
}
