package frontend

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

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
	// hold is how long a request that every decode worker tried refused for
	// room is held and offered again (HoldRefused); 0: the client hears 429
	// at once.
	hold      time.Duration
	held      *prometheus.CounterVec
	heldFor   prometheus.Histogram
	holdFirst time.Duration // the first wait; doubled up to holdMaxWait
}

// holdMaxWait caps the wait between offers of a held request: room frees as
// sequences end, many a second on a busy worker.
const holdMaxWait = time.Second

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

// HoldRefused makes Generate hold a request that every decode worker it was
// offered to refused for room (ResourceExhausted: at capacity, on load, no
// room for its KV; not a shed) and offer it again, after 50 ms doubling to a
// second, for up to d, before the client hears 429. Room on a decode worker
// frees as its sequences end, and a client that does not retry a 429 (a batch
// job) loses the request to a moment's state. It is not a goodput lever: the
// requests refused for KV room are the largest, and placed late they cost the
// others their objectives. reg takes
// the held requests' metrics; nil leaves them unregistered.
func (b *Routed) HoldRefused(d time.Duration, reg prometheus.Registerer) {
	f := promauto.With(reg)
	b.hold, b.holdFirst = d, 50*time.Millisecond
	b.held = f.NewCounterVec(prometheus.CounterOpts{
		Name: "tandem_frontend_held_requests_total",
		Help: "Requests every decode worker refused for room, held and offered again: placed; refused at the end of the hold; " +
			"failed on another error; cancelled by the client meanwhile.",
	}, []string{"outcome"})
	b.heldFor = f.NewHistogram(prometheus.HistogramOpts{
		Name:    "tandem_frontend_held_seconds",
		Help:    "How long a held request waited before it was placed or refused.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
	})
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
	var start time.Time
	wait := b.holdFirst
	for {
		s, route, refused, shed, err := b.offer(ctx, rreq, req)
		if err == nil || len(refused) == 0 || shed || b.hold <= 0 {
			var held time.Duration
			if !start.IsZero() {
				outcome := "placed"
				switch {
				case err != nil && ctx.Err() != nil:
					outcome = "cancelled"
				case err != nil:
					outcome = "failed"
				}
				held = b.endHold(outcome, start)
			}
			switch {
			case err != nil && len(refused) > 0:
				return nil, nil, allRefused(refused, held)
			case err != nil:
				return nil, nil, err // not a nil *tokenStream in a non-nil TokenStream
			}
			return s, route, nil
		}
		if start.IsZero() {
			start = time.Now()
		}
		// Jitter keeps the requests refused together from coming back together.
		d := time.Duration(float64(wait) * (0.8 + 0.4*rand.Float64()))
		if time.Since(start)+d > b.hold {
			return nil, nil, allRefused(refused, b.endHold("refused", start))
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			b.endHold("cancelled", start)
			return nil, nil, status.FromContextError(ctx.Err()).Err()
		case <-t.C:
		}
		wait = min(2*wait, holdMaxWait)
		rreq.ExcludeWorkerIds = nil
	}
}

// endHold counts a hold that ended with outcome, and returns how long it was.
func (b *Routed) endHold(outcome string, start time.Time) time.Duration {
	held := time.Since(start)
	b.held.WithLabelValues(outcome).Inc()
	b.heldFor.Observe(held.Seconds())
	return held
}

// offer routes the request and starts it, on up to MaxDecodeAttempts decode
// workers. refused are the words of those that refused it (ResourceExhausted),
// when every worker tried refused it or could not be reached and at least one
// refused; shed says one of them shed it (its TTFT projected unmeetable, no
// matter of room), so it is not held.
func (b *Routed) offer(ctx context.Context, rreq *routerv1.RouteRequest, req *decodev1.GenerateRequest) (
	*tokenStream, *routerv1.RouteResponse, []string, bool, error) {
	var lastErr error
	var refused []string // the workers' own words, for the client
	shed := false
	for range MaxDecodeAttempts {
		route, err := b.router.Route(ctx, rreq)
		if err != nil {
			if len(refused) > 0 && status.Code(err) == codes.Unavailable {
				// Nobody else to try: the full workers' answers ("at capacity",
				// 429) say more than the router's "no decode worker is available".
				// (An unreachable worker's dial error is not for the client.)
				return nil, nil, refused, shed, err
			}
			return nil, nil, nil, false, err
		}
		s, err := b.start(ctx, route, req)
		if err == nil {
			return s, route, nil, false, nil
		}
		// Unreachable or at capacity, before it took the request: another worker
		// may have room.
		c := status.Code(err)
		if c != codes.Unavailable && c != codes.ResourceExhausted {
			return nil, nil, nil, false, err
		}
		if c == codes.ResourceExhausted {
			st := status.Convert(err)
			refused = append(refused, st.Message())
			shed = shed || isShed(st)
		}
		lastErr = err
		rreq.ExcludeWorkerIds = append(rreq.ExcludeWorkerIds, route.GetDecodeWorker().GetId())
	}
	return nil, nil, refused, shed, lastErr
}

// The ErrorInfo of a decode worker's shed, as decode writes it (decode.ErrorDomain
// and RejectTTFTUnmeetable, upper-cased): strings on the wire, not an import of
// the decode package.
const (
	decodeErrorDomain = "tandem.decode.v1"
	reasonShed        = "TTFT_UNMEETABLE"
)

// isShed says whether a decode worker's refusal was a shed: the request would
// miss its TTFT objective on every path, and holding it would only make it later.
func isShed(st *status.Status) bool {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == decodeErrorDomain && ei.GetReason() == reasonShed {
			return true
		}
	}
	return false
}

// allRefused is the answer when every decode worker tried that could be reached
// refused the request: ResourceExhausted (a 429 the client retries), saying how
// many and why, in each worker's words.
func allRefused(refused []string, held time.Duration) error {
	after := ""
	if held > 0 {
		after = fmt.Sprintf(" after it was held %.1fs for room", held.Seconds())
	}
	return status.Errorf(codes.ResourceExhausted, "no decode worker took the request%s: %d refused it (%s); retry later",
		after, len(refused), strings.Join(refused, "; "))
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
	return &tokenStream{stream: stream, first: first, cancel: cancel, maxTokens: int(r.GetMaxTokens())}, nil
}

// tokenStream is a started request: its first message, already read, then the rest.
type tokenStream struct {
	stream grpc.ServerStreamingClient[decodev1.GenerateResponse]
	first  *decodev1.GenerateResponse
	cancel context.CancelFunc
	// finished is set once a message with a finish reason is read, or the
	// request's every token: the worker ends the stream next, after its final
	// message in the second case.
	finished          bool
	tokens, maxTokens int
}

func (t *tokenStream) Recv() (*decodev1.GenerateResponse, error) {
	m := t.first
	if m != nil {
		t.first = nil
	} else {
		var err error
		if m, err = t.stream.Recv(); err != nil {
			return nil, err
		}
	}
	t.tokens += len(m.GetTokenIds())
	t.finished = t.finished || m.GetFinishReason() != decodev1.FinishReason_FINISH_REASON_UNSPECIFIED ||
		(t.maxTokens > 0 && t.tokens >= t.maxTokens)
	return m, nil
}

// streamEndWait bounds how long Close waits for a finished stream's end.
const streamEndWait = time.Second

// Close cancels the call. A stream whose last message was read is first read to
// its end, so that it finishes OK, as it did, rather than cancelled (which its
// client span and metrics would report).
func (t *tokenStream) Close() error {
	if t.finished {
		// A worker that sent its last message but never ends the stream holds
		// the request no longer than this.
		stop := time.AfterFunc(streamEndWait, t.cancel)
		for range 2 {
			if _, err := t.stream.Recv(); err != nil {
				break
			}
		}
		stop.Stop()
	}
	t.cancel()
	return nil
}
