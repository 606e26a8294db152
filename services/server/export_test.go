package server

import (
	"context"

	"connectrpc.com/grpchealth"
)

// HealthStatus is what grpc.health.v1 answers for the whole server, read without a
// connection: once shutdown begins the listener is closed, so no new caller can ask.
func (s *Server) HealthStatus() grpchealth.Status {
	r, err := s.health.Check(context.Background(), &grpchealth.CheckRequest{})
	if err != nil {
		return grpchealth.StatusUnknown
	}
	return r.Status
}
