package prefill

import (
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
)

// GRPC serves the same Prefill through a grpc-go server, for the KV transfer port.
// grpc-go's transport gathers a stream's DATA frames into one socket write per
// write buffer, where net/http's HTTP/2 server makes a write per 16 KiB frame (the
// largest frame a grpc-go client accepts); on loopback that per-frame cost halves
// the handoff's throughput.
type GRPC struct {
	prefillv1.UnimplementedPrefillServiceServer
	s *Service
}

var _ prefillv1.PrefillServiceServer = (*GRPC)(nil)

// GRPC returns the grpc-go face of s.
func (s *Service) GRPC() *GRPC { return &GRPC{s: s} }

// Prefill runs the prompt and streams its KV, as Service.Prefill does, with the
// same status codes.
func (g *GRPC) Prefill(req *prefillv1.PrefillRequest, stream grpc.ServerStreamingServer[prefillv1.PrefillResponse]) error {
	return grpcStatus(g.s.serve(stream.Context(), req, stream.Send, PortKV))
}

// grpcStatus carries a Connect error's code and message over grpc-go, which would
// otherwise report it as Unknown. The codes are the same numbers.
func grpcStatus(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return status.Error(codes.Code(ce.Code()), ce.Message())
	}
	return err
}
