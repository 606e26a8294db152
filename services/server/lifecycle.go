package server

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// defaultGrace is the grace period of a server configured with none.
const defaultGrace = 10 * time.Second

// Lifecycle is how a listening server serves and stops, for Run: the main port's
// net/http server and a KV transfer port's grpc-go server alike.
type Lifecycle struct {
	// Serve serves until the server is stopped; then it returns Stopped.
	Serve   func() error
	Stopped error
	// Drain runs first when the context ends: deregistration, NOT_SERVING.
	Drain func()
	// Graceful stops accepting and waits for in-flight work, returning ctx's error
	// if ctx ends first; Cut then ends what is left.
	Graceful func(ctx context.Context) error
	Cut      func() error
	// Grace bounds the graceful stop (0: defaultGrace).
	Grace time.Duration
	Log   *slog.Logger
	// Cutting says what Cut does, for the warning when the grace period ends.
	Cutting string
}

// Run serves until ctx ends, then drains, stops gracefully and, once the grace
// period is over, cuts what is left. A server that stops serving by itself returns
// its error at once.
func (l Lifecycle) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- l.Serve() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	if l.Drain != nil {
		l.Drain()
	}
	grace := l.Grace
	if grace <= 0 {
		grace = defaultGrace
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := l.Graceful(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		l.Log.Warn("drain timeout over, "+l.Cutting, "drain_timeout", grace)
		err = l.Cut()
	}
	if e := <-errc; e != nil && !errors.Is(e, l.Stopped) {
		return e
	}
	return err
}
