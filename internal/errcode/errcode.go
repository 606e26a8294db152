// Package errcode gives an engine failure the status code a caller can act on, for
// the services that run an engine (decode and prefill).
package errcode

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandem-serve/tandem/engine"
)

// Error gives err the code Of finds for it. A failure that already carries a code
// keeps it: a Connect error as it is, a grpc-go status (e.g. a remote prefill
// stream's Canceled when this request's client went away) by its code, so that a
// cancelled request is Canceled end to end, never Internal.
func Error(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) && ce == err {
		return ce
	}
	return connect.NewError(Of(err), err)
}

// Of is the status code Error gives err.
func Of(err error) connect.Code {
	switch {
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded
	case errors.Is(err, engine.ErrPromptTooLong), errors.Is(err, engine.ErrBadConstraint), errors.Is(err, engine.ErrNoPromptLogprobs):
		return connect.CodeInvalidArgument
	case errors.Is(err, engine.ErrNoBlocks):
		return connect.CodeResourceExhausted
	case errors.Is(err, engine.ErrClosed), errors.Is(err, engine.ErrUnavailable):
		return connect.CodeUnavailable
	case errors.Is(err, engine.ErrRejected):
		return connect.CodeInvalidArgument
	case errors.Is(err, engine.ErrNoTransferParams), errors.Is(err, engine.ErrNoExport):
		return connect.CodeFailedPrecondition
	case errors.Is(err, engine.ErrLayoutMismatch), errors.Is(err, engine.ErrBadBlock):
		return connect.CodeFailedPrecondition
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code()
	}
	if s, ok := status.FromError(err); ok && s.Code() != codes.OK {
		return connect.Code(s.Code())
	}
	return connect.CodeInternal
}
