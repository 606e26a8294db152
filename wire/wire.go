// Package wire converts between the engine's types and the protos, including the
// status code each engine failure carries to a caller.
package wire

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandem-serve/tandem/engine"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// Sampling converts sampling parameters from the wire.
func Sampling(p *workerv1.SamplingParams) engine.Sampling {
	return engine.Sampling{Temperature: p.GetTemperature(), TopP: p.GetTopP(), TopK: int(p.GetTopK()), Seed: p.GetSeed()}
}

// SamplingProto converts sampling parameters for the wire.
func SamplingProto(s engine.Sampling) *workerv1.SamplingParams {
	return &workerv1.SamplingParams{Temperature: s.Temperature, TopP: s.TopP, TopK: uint32(s.TopK), Seed: s.Seed}
}

// Load is the engine's load as the protos carry it.
func Load(st engine.Stats) *workerv1.Load {
	return &workerv1.Load{
		RunningSequences: uint32(st.Running), WaitingSequences: uint32(st.Waiting),
		WaitingTokens: uint64(st.WaitingTokens), FreeBlocks: uint32(st.FreeBlocks + st.CachedBlocks),
		TotalBlocks: uint32(st.TotalBlocks), ActiveBlocks: uint32(st.ActiveBlocks),
	}
}

var dtypes = map[string]workerv1.KVDtype{
	"f32": workerv1.KVDtype_KV_DTYPE_F32, "f16": workerv1.KVDtype_KV_DTYPE_F16, "bf16": workerv1.KVDtype_KV_DTYPE_BF16,
}

// LayoutProto converts a KV layout for the wire.
func LayoutProto(l engine.Layout) *workerv1.KVLayout {
	return &workerv1.KVLayout{
		Layers: uint32(l.Layers), KvHeads: uint32(l.KVHeads), HeadDim: uint32(l.HeadDim), Dtype: dtypes[l.Dtype],
		BlockSize: uint32(l.BlockSize), BlockBytes: uint64(l.BlockBytes), ModelFingerprint: l.Fingerprint,
	}
}

// Layout is the inverse of LayoutProto.
func Layout(p *workerv1.KVLayout) engine.Layout {
	dt := ""
	for name, v := range dtypes {
		if v == p.GetDtype() {
			dt = name
		}
	}
	return engine.Layout{
		Layers: int(p.GetLayers()), KVHeads: int(p.GetKvHeads()), HeadDim: int(p.GetHeadDim()), Dtype: dt,
		BlockSize: int(p.GetBlockSize()), BlockBytes: int(p.GetBlockBytes()), Fingerprint: p.GetModelFingerprint(),
	}
}

// Error gives an engine failure the status code a caller can act on. A failure that
// already carries a code keeps it: a Connect error as it is, a grpc-go status (e.g.
// a remote prefill stream's Canceled when this request's client went away) by its
// code, so that a cancelled request is Canceled end to end, never Internal.
func Error(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) && ce == err {
		return ce
	}
	return connect.NewError(Code(err), err)
}

// Code is the status code Error gives err.
func Code(err error) connect.Code {
	switch {
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded
	case errors.Is(err, engine.ErrPromptTooLong):
		return connect.CodeInvalidArgument
	case errors.Is(err, engine.ErrNoBlocks):
		return connect.CodeResourceExhausted
	case errors.Is(err, engine.ErrClosed):
		return connect.CodeUnavailable
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

// PathName is the name a prefill path goes by in headers, bodies, logs and metric
// labels: "local", "remote", "fallback", or "unknown" when unset.
func PathName(p decodev1.PrefillPath) string {
	switch p {
	case decodev1.PrefillPath_PREFILL_PATH_LOCAL:
		return "local"
	case decodev1.PrefillPath_PREFILL_PATH_REMOTE:
		return "remote"
	case decodev1.PrefillPath_PREFILL_PATH_FALLBACK:
		return "fallback"
	}
	return "unknown"
}
