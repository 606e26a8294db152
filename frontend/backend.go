package frontend

import (
	"context"

	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
)

// Backend runs a tokenized request on some decode worker: in production Routed,
// where the router picks the worker and the decode service runs it; in unit tests
// a fake stands in.
type Backend interface {
	// Generate routes req and starts it. route describes where it went and why; it
	// is non-nil whenever err is nil.
	Generate(ctx context.Context, req *decodev1.GenerateRequest) (TokenStream, *routerv1.RouteResponse, error)
}

// TokenStream yields the decode service's responses. Recv returns io.EOF after the
// last one. Close releases the stream early (cancelling the request if it still runs).
type TokenStream interface {
	Recv() (*decodev1.GenerateResponse, error)
	Close() error
}
