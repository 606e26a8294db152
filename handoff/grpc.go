package handoff

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
)

// GRPCClient is a Client over a grpc-go connection to a prefill worker's KV
// transfer port or main port. Each stream reads its chunks with a codec of its own
// that reuses one buffer: a chunk is valid only until the next Recv.
func GRPCClient(cc grpc.ClientConnInterface) Client {
	return grpcClient{prefillv1.NewPrefillServiceClient(cc)}
}

type grpcClient struct {
	c prefillv1.PrefillServiceClient
}

func (g grpcClient) Prefill(ctx context.Context, req *prefillv1.PrefillRequest) (Stream, error) {
	return g.c.Prefill(ctx, req, grpc.ForceCodecV2(&chunkCodec{}))
}

// Settings of the grpc-go transport a handoff runs on, for a KV transfer port and
// the connections to it: the sizes at which a handoff on loopback moved the most
// bytes per CPU second.
const (
	// WriteBufferBytes is the server's per-connection write buffer: a flush moves
	// up to this much in one write. It is shared across idle connections
	// (grpc.SharedWriteBuffer), so an idle connection holds none of it.
	WriteBufferBytes = 1 << 20
	// WindowBytes is a receiving stream's window: a transfer runs without waiting
	// for window updates while at most four 1 MiB chunks are in flight. The
	// connection's has room for four transfers at once. (Static windows turn
	// grpc-go's BDP estimator off; BenchmarkHandoffTuning compares sizes: larger
	// windows bought nothing on loopback, smaller ones cost throughput.)
	WindowBytes     = 4 << 20
	ConnWindowBytes = 4 * WindowBytes
	// ReadBufferBytes lets one read take in many frames.
	ReadBufferBytes = 1 << 20
)

// ServerOptions are a KV transfer port's grpc-go server settings.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.WriteBufferSize(WriteBufferBytes), grpc.SharedWriteBuffer(true),
		// Clients ping a connection with calls in flight after 10 s of silence, to
		// find a dead host; grpc-go's default policy (5 min) would close it for that.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second})}
}

// DialOptions are added to the usual client options when dialling a KV transfer
// port.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithInitialWindowSize(WindowBytes),
		grpc.WithInitialConnWindowSize(ConnWindowBytes),
		grpc.WithReadBufferSize(ReadBufferBytes),
	}
}
