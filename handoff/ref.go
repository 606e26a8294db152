package handoff

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/internal/errcode"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
)

// The handoff by reference: for engines that move KV themselves, the header
// carries the prefill engine's transfer parameters instead of a block count, no
// chunk follows, and the trailer comes once the prefill engine's side is over
// (for SGLang, whose two legs run at once, after the decode leg has started).
// The receiver starts its engine's decode leg with the parameters as soon as the
// header arrives, and keeps it only if the trailer does.

// Reasons a handoff by reference fails, beyond those it shares with chunks.
const (
	ReasonNoParams = "no_transfer_params" // the prefill engine returned none
)

// OutcomeEngineError is a sender's prefill engine failing after the header.
const OutcomeEngineError = "engine_error"

// SendRef sends exp's transfer parameters in the header, waits for the prefill
// engine's side to finish, and sends the trailer.
func SendRef(ctx context.Context, exp engine.RefExport, m Meta, send func(*prefillv1.PrefillResponse) error) error {
	if len(exp.Params()) == 0 {
		return &SendError{Outcome: OutcomeEngineError, Err: connect.NewError(connect.CodeFailedPrecondition, engine.ErrNoTransferParams)}
	}
	err := send(&prefillv1.PrefillResponse{Msg: &prefillv1.PrefillResponse_Header{Header: &prefillv1.Header{
		RequestId: m.RequestID, PromptTokens: uint32(m.PromptTokens), BlockSize: uint32(m.Layout.BlockSize),
		Layout: LayoutProto(m.Layout), WorkerId: m.WorkerID, TransferParams: exp.Params(),
	}}})
	if err != nil {
		return &SendError{Outcome: OutcomeSendError, Err: err}
	}
	if err := exp.Wait(ctx); err != nil {
		return &SendError{Outcome: OutcomeEngineError, Err: connect.NewError(errcode.Of(err), fmt.Errorf("prefill engine: %w", err))}
	}
	err = send(&prefillv1.PrefillResponse{Msg: &prefillv1.PrefillResponse_Trailer{Trailer: &prefillv1.Trailer{
		PrefillTime: durationpb.New(exp.PrefillTime()), QueueTime: durationpb.New(exp.QueueTime()),
	}}})
	if err != nil {
		return &SendError{Outcome: OutcomeSendError, Err: err}
	}
	return nil
}

// RefEngine is what the receiving side of a handoff by reference needs.
type RefEngine interface {
	Engine
	engine.RefImporter
}

// runRef is Run for an engine that takes KV by reference.
func (f Fetch) runRef(ctx context.Context, client Client, eng RefEngine, req engine.Request) (engine.Stream, *Result, error) {
	start := time.Now()
	hctx, cancel := context.WithTimeout(ctx, f.Deadline)
	defer cancel()
	headed := f.headedOnce()
	defer headed()
	m := request(req, 0, f.Deadline)
	m.ByReference, m.MaxTokens, m.StopTokenIds = true, uint32(req.MaxTokens), req.StopTokens
	stream, err := client.Prefill(hctx, m)
	if err != nil {
		return nil, nil, classify(hctx, err, true)
	}
	msg, err := stream.Recv()
	headed()
	if err != nil {
		return nil, nil, classify(hctx, err, true)
	}
	h := msg.GetHeader()
	switch l := Layout(h.GetLayout()); {
	case h == nil:
		return nil, nil, failed(ReasonProtocol, true, "first message is not a header")
	case l != eng.Info().Layout:
		return nil, nil, failed(ReasonLayout, true, "prefill worker %s serves %q (block size %d), this worker %q (block size %d)",
			f.Worker, l.Fingerprint, l.BlockSize, eng.Info().Layout.Fingerprint, eng.Info().Layout.BlockSize)
	case len(h.GetTransferParams()) == 0:
		return nil, nil, failed(ReasonNoParams, true, "prefill worker %s sent no transfer parameters", f.Worker)
	}
	// The decode leg lives as long as the request, not the handoff's deadline.
	out, err := eng.ImportRef(ctx, req, h.GetTransferParams())
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		if errors.Is(err, engine.ErrNoBlocks) {
			// As in Run: the decode engine's pool is full, which no other
			// prefill worker and no local prefill there can help.
			return nil, nil, failed(ReasonImportNoBlocks, false, "decode engine: %v", err)
		}
		// The decode engine refused the parameters: another prefill worker's
		// would fare no better; local prefill may.
		return nil, nil, failed(ReasonImportFailed, false, "decode engine: %v", err)
	}
	msg, err = stream.Recv()
	switch {
	case errors.Is(err, io.EOF):
		err = failed(ReasonMidTransfer, true, "stream ended without a trailer")
	case err != nil:
		err = classify(hctx, err, true)
	case msg.GetTrailer() == nil:
		err = failed(ReasonProtocol, true, "a chunk in a handoff by reference")
	}
	if err != nil {
		// The prefill failed after the decode leg started: abandon the leg (its
		// KV never arrives) and let the ladder try again.
		out.Close()
		return nil, nil, err
	}
	t := msg.GetTrailer()
	return out, &Result{Stats: Stats{Prefill: t.GetPrefillTime().AsDuration(), Queue: t.GetQueueTime().AsDuration()}, Total: time.Since(start)}, nil
}
