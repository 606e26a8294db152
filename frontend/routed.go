package frontend

import (
	"context"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tandem-serve/tandem/internal/requestid"
	"github.com/tandem-serve/tandem/kvcache/blockhash"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
)

// Router is what the frontend asks of the router service.
type Router interface {
	Route(ctx context.Context, in *routerv1.RouteRequest, opts ...grpc.CallOption) (*routerv1.RouteResponse, error)
}

// DecodeWorkers gives a client of the decode worker at an address. services/
// keeps the connections.
type DecodeWorkers func(addr string) (decodev1.DecodeServiceClient, error)

// Routed is the Backend of a deployment: it hashes the prompt's blocks, asks the
// router where the request goes, and starts it on that decode worker with the
// router's ranking of prefill workers.
type Routed struct {
	router Router
	decode DecodeWorkers
	// served is the model's fingerprint and block size, from its model card.
	served atomic.Pointer[servedModel]
}

type servedModel struct {
	fingerprint string
	blockSize   int
}

var _ Backend = (*Routed)(nil)

// NewRouted returns the backend that routes with router and runs requests on the
// decode workers decode reaches, once SetModel has said what it serves.
func NewRouted(router Router, decode DecodeWorkers) *Routed {
	return &Routed{router: router, decode: decode}
}

// SetModel is the served model's fingerprint and block size, from its model card:
// the router places requests only on workers of those weights, by blocks of that
// size.
func (b *Routed) SetModel(fingerprint string, blockSize int) {
	b.served.Store(&servedModel{fingerprint: fingerprint, blockSize: blockSize})
}

// MaxDecodeAttempts is how many distinct decode workers one request is offered
// before the client is told to retry: each one that refused (full, on count, on
// load or on KV blocks) or could not be reached is excluded from the next route.
// Trying only two meant a client got a 429 while a third worker had room; trying
// every worker would let one request cost a round trip per worker of a large fleet
// that is all full. The router's "none available" ends the walk sooner.
const MaxDecodeAttempts = 3

// Generate routes the request and starts it. A decode worker that cannot be reached,
// or is full, before it sends anything is excluded and the request routed again,
// up to MaxDecodeAttempts workers, so a dead or busy worker costs a retry, not an
// error.
func (b *Routed) Generate(ctx context.Context, req *decodev1.GenerateRequest) (TokenStream, *routerv1.RouteResponse, error) {
	ctx = requestid.With(ctx, req.GetRequestId())
	m := b.served.Load()
	if m == nil || m.blockSize <= 0 {
		return nil, nil, status.Error(codes.Unavailable, "no model card loaded yet")
	}
	rreq := &routerv1.RouteRequest{
		RequestId: req.GetRequestId(), PromptTokens: uint32(len(req.GetPromptTokenIds())),
		BlockHashes: blockhash.Hash(req.GetPromptTokenIds(), m.blockSize), BlockSize: uint32(m.blockSize),
		Explain: req.GetExplain(), ModelFingerprint: m.fingerprint,
	}
	var lastErr error
	var refused []string // the full workers' own words, for the client
	for range MaxDecodeAttempts {
		route, err := b.router.Route(ctx, rreq)
		if err != nil {
			if len(refused) > 0 && status.Code(err) == codes.Unavailable {
				// Nobody else to try: the full workers' answers ("at capacity",
				// 429) say more than the router's "no decode worker is available".
				// (An unreachable worker's dial error is not for the client.)
				return nil, nil, allRefused(refused)
			}
			return nil, nil, err
		}
		s, err := b.start(ctx, route, req)
		if err == nil {
			return s, route, nil
		}
		// Unreachable or at capacity, before it took the request: another worker
		// may have room.
		c := status.Code(err)
		if c != codes.Unavailable && c != codes.ResourceExhausted {
			return nil, nil, err
		}
		if c == codes.ResourceExhausted {
			refused = append(refused, status.Convert(err).Message())
		}
		lastErr = err
		rreq.ExcludeWorkerIds = append(rreq.ExcludeWorkerIds, route.GetDecodeWorker().GetId())
	}
	if len(refused) > 0 {
		return nil, nil, allRefused(refused)
	}
	return nil, nil, lastErr
}

// allRefused is the answer when every decode worker tried that could be reached
// refused the request: ResourceExhausted (a 429 the client retries), saying how
// many and why, in each worker's words.
func allRefused(refused []string) error {
	return status.Errorf(codes.ResourceExhausted, "no decode worker took the request: %d refused it (%s); retry later",
		len(refused), strings.Join(refused, "; "))
}

// start runs req on the route's decode worker, with the route's prefill ranking.
func (b *Routed) start(ctx context.Context, route *routerv1.RouteResponse, req *decodev1.GenerateRequest) (*tokenStream, error) {
	client, err := b.decode(route.GetDecodeWorker().GetAddress())
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	r := proto.CloneOf(req)
	r.PrefillWorkers = nil
	for _, p := range route.GetPrefillWorkers() {
		r.PrefillWorkers = append(r.PrefillWorkers, &decodev1.PrefillCandidate{
			WorkerId: p.GetWorker().GetId(), QueuedTokens: p.GetQueuedTokens(), CachedBlocks: p.GetCachedBlocks(),
			Cost: p.GetCost(), QueueCostPerToken: p.GetQueueCostPerToken(),
		})
	}
	sctx, cancel := context.WithCancel(ctx)
	stream, err := client.Generate(sctx, r)
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

// tokenStream is a started request: its first message, already read, then the rest.
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
