package frontend

import (
	"context"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
)

// admission bounds the requests a frontend has in flight. Up to max run; up to
// queue more wait, in arrival order, for at most wait; past that a request is
// refused at once with ResourceExhausted (429), and one that waited too long gets
// Unavailable (503). Either way the client is told to retry, instead of every
// request slowing down together until all of them time out.
type admission struct {
	slots chan struct{}
	mu    sync.Mutex
	queue int // requests waiting now
	max   int
	limit int // queue bound
	wait  time.Duration
	m     *metrics
}

func newAdmission(maxInFlight, maxQueue int, wait time.Duration, m *metrics) *admission {
	return &admission{slots: make(chan struct{}, maxInFlight), max: maxInFlight, limit: maxQueue, wait: wait, m: m}
}

func (a *admission) acquire(ctx context.Context) error {
	select {
	case a.slots <- struct{}{}:
		return nil
	default:
	}
	a.mu.Lock()
	if a.queue >= a.limit {
		a.mu.Unlock()
		a.m.rejected.WithLabelValues("queue_full").Inc()
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("too many requests: %d in flight and %d queued; retry later", a.max, a.limit))
	}
	a.queue++
	a.m.queued.Inc()
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.queue--
		a.m.queued.Dec()
		a.mu.Unlock()
	}()
	t := time.NewTimer(a.wait)
	defer t.Stop()
	select {
	case a.slots <- struct{}{}:
		return nil
	case <-t.C:
		a.m.rejected.WithLabelValues("queue_timeout").Inc()
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("waited %s for one of %d request slots; retry later", a.wait, a.max))
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *admission) release() { <-a.slots }

// admittedBackend holds a slot from Generate until the stream is closed.
type admittedBackend struct {
	Backend
	a *admission
}

func (b admittedBackend) Generate(ctx context.Context, req *decodev1.GenerateRequest) (TokenStream, *routerv1.RouteResponse, error) {
	if err := b.a.acquire(ctx); err != nil {
		return nil, nil, err
	}
	s, route, err := b.Backend.Generate(ctx, req)
	if err != nil {
		b.a.release()
		return nil, nil, err
	}
	return &admittedStream{TokenStream: s, a: b.a}, route, nil
}

type admittedStream struct {
	TokenStream
	a    *admission
	once sync.Once
}

func (s *admittedStream) Close() error {
	err := s.TokenStream.Close()
	s.once.Do(s.a.release)
	return err
}
