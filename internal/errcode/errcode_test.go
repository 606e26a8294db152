package errcode_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/internal/errcode"
)

// TestErrorCode: the code a caller sees for each kind of failure. A cancelled or
// timed-out request must read as Canceled or DeadlineExceeded whichever transport
// reported it (a grpc-go stream reports a status, not a context error), never as
// Internal, or every client cancel is logged and counted as a server failure.
func TestErrorCode(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want connect.Code
	}{
		{"context canceled", context.Canceled, connect.CodeCanceled},
		{"wrapped context canceled", fmt.Errorf("import: %w", context.Canceled), connect.CodeCanceled},
		{"context deadline", context.DeadlineExceeded, connect.CodeDeadlineExceeded},
		{"grpc canceled", status.Error(codes.Canceled, "context canceled"), connect.CodeCanceled},
		{"wrapped grpc canceled", fmt.Errorf("prefill: %w", status.Error(codes.Canceled, "context canceled")), connect.CodeCanceled},
		{"grpc deadline", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), connect.CodeDeadlineExceeded},
		{"grpc unavailable", status.Error(codes.Unavailable, "gone"), connect.CodeUnavailable},
		{"connect canceled", connect.NewError(connect.CodeCanceled, errors.New("bye")), connect.CodeCanceled},
		{"wrapped connect deadline", fmt.Errorf("x: %w", connect.NewError(connect.CodeDeadlineExceeded, errors.New("late"))), connect.CodeDeadlineExceeded},
		{"prompt too long", engine.ErrPromptTooLong, connect.CodeInvalidArgument},
		{"no blocks", fmt.Errorf("import: %w", engine.ErrNoBlocks), connect.CodeResourceExhausted},
		{"closed", engine.ErrClosed, connect.CodeUnavailable},
		{"bad block", engine.ErrBadBlock, connect.CodeFailedPrecondition},
		{"anything else", errors.New("boom"), connect.CodeInternal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := errcode.Error(tc.err)
			if got := connect.CodeOf(err); got != tc.want {
				t.Errorf("errcode.Error(%v) has code %v, want %v", tc.err, got, tc.want)
			}
			if !errors.Is(err, tc.err) {
				t.Errorf("errcode.Error(%v) = %v no longer wraps the cause", tc.err, err)
			}
		})
	}
}

// TestErrorKeepsConnectError: a Connect error passes through as it is, not wrapped
// in a second one whose message repeats the code.
func TestErrorKeepsConnectError(t *testing.T) {
	ce := connect.NewError(connect.CodeCanceled, errors.New("client went away"))
	if got := errcode.Error(ce); got != error(ce) {
		t.Errorf("errcode.Error(%v) = %v, want the same error", ce, got)
	}
}
