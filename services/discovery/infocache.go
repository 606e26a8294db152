package discovery

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"

	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// InfoCache shares WorkerService.Info answers among the directories of one
// process. Under tandem up, 900 decode workers given the same 100 prefill
// addresses asked 90,000 times at once who was there, and many questions timed
// out; with the cache, questions about one address asked while one is out share
// its answer, and an answer serves for ttl (short, so that a directory asking
// again after a miss hears what is there now).
type InfoCache struct {
	ask InfoFunc
	ttl time.Duration

	mu    sync.Mutex
	calls map[string]*infoCall
}

type infoCall struct {
	done chan struct{}
	info *workerv1.WorkerInfo
	err  error
	at   time.Time // when answered
	// gaveUp: the asker's own context ended the call, which says nothing of the
	// worker; those waiting on it ask again under theirs.
	gaveUp bool
}

// NewInfoCache asks through ask; ttl is how long an answer is reused.
func NewInfoCache(ask InfoFunc, ttl time.Duration) *InfoCache {
	return &InfoCache{ask: ask, ttl: ttl, calls: map[string]*infoCall{}}
}

// Info is an InfoFunc. A failed answer is not kept: the next question asks again.
func (c *InfoCache) Info(ctx context.Context, addr string) (*workerv1.WorkerInfo, error) {
	c.mu.Lock()
	call, ok := c.calls[addr]
	fresh := ok && (call.at.IsZero() || (call.err == nil && time.Since(call.at) < c.ttl))
	if !fresh {
		call = &infoCall{done: make(chan struct{})}
		c.calls[addr] = call
		c.mu.Unlock()
		// Under the first asker's context: if it gives up, those waiting ask again.
		info, err := c.ask(ctx, addr)
		c.mu.Lock()
		call.info, call.err, call.at, call.gaveUp = info, err, time.Now(), err != nil && ctx.Err() != nil
		if err != nil && c.calls[addr] == call {
			delete(c.calls, addr)
		}
		c.mu.Unlock()
		close(call.done)
		return info, err
	}
	c.mu.Unlock()
	select {
	case <-call.done:
		if call.gaveUp && ctx.Err() == nil {
			return c.Info(ctx, addr)
		}
		return call.info, call.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// InfoVia is an InfoFunc that calls over the connections get returns (an
// rpc.Conns's Get).
func InfoVia(get func(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error)) InfoFunc {
	return func(ctx context.Context, addr string) (*workerv1.WorkerInfo, error) {
		cc, err := get(addr)
		if err != nil {
			return nil, err
		}
		r, err := workerv1.NewWorkerServiceClient(cc).Info(ctx, &workerv1.InfoRequest{})
		return r.GetInfo(), err
	}
}
