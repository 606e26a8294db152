// Package handoff is the KV handoff between a prefill worker and a decode worker,
// both halves of it. The sender streams a prefilled prompt's KV out of one engine
// as a header (request id, first token, prompt length, KV layout, number of blocks,
// how many leading blocks the receiver already holds and are therefore skipped),
// then chunks of whole blocks each with its CRC32C, then a trailer with the totals
// and timings. The receiver checks every message before its engine sees it; any
// mismatch, gap or timeout is an *Error that says whether another prefill worker
// may be tried, which the decode worker's fallback ladder reads.
//
// The messages are prefill.v1's PrefillResponse. The transport is whatever carries
// them: the sender sees a send function, the receiver a Stream. GRPCClient is the
// receiving side over grpc-go, with its codec; an in-process pipe serves as well.
//
// The handoff by reference (ref.go) is the same RPC for engines that move KV
// themselves (NIXL, UCX, Mooncake): the header carries the prefill engine's
// transfer parameters, no chunk follows, and the decode worker's engine is given
// them; the decision, the ladder and the metrics around it are the same.
package handoff

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tandem-serve/tandem/engine"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// Client starts a handoff on one prefill worker.
type Client interface {
	Prefill(ctx context.Context, req *prefillv1.PrefillRequest) (Stream, error)
}

// Stream is the receiving end of one handoff. A chunk's data may be valid only
// until the next Recv (GRPCClient's codec reuses its buffer).
type Stream interface {
	Recv() (*prefillv1.PrefillResponse, error)
}

// request asks a prefill worker for req's KV. The receiver holds the first skip
// blocks and waits at most lease for the rest; the sender holds the KV no longer.
func request(req engine.Request, skip int, lease time.Duration) *prefillv1.PrefillRequest {
	return &prefillv1.PrefillRequest{
		RequestId: req.ID, PromptTokenIds: req.Prompt, Sampling: RequestSampling(req),
		SkipBlocks: uint32(skip), Lease: durationpb.New(lease),
	}
}

// EngineRequest is what the sender's engine runs for m: the prompt, with m's
// sampling, for the one token the header carries. A handoff by reference keeps
// the rest of the request (max tokens, stop tokens), which an engine's prefill
// leg carries.
func EngineRequest(m *prefillv1.PrefillRequest) engine.Request {
	sp := m.GetSampling()
	r := engine.Request{ID: m.GetRequestId(), Prompt: m.GetPromptTokenIds(), Sampling: Sampling(sp), MaxTokens: 1,
		Logprobs: sp.GetLogprobs(), TopLogprobs: min(int(sp.GetTopLogprobs()), engine.MaxTopLogprobs)}
	if m.GetByReference() {
		r.MaxTokens, r.StopTokens = int(m.GetMaxTokens()), m.GetStopTokenIds()
	}
	return r
}

// RequestSampling is req's sampling for the wire, with its logprobs request: the
// prefill worker draws the first token and reports its logprobs too.
func RequestSampling(req engine.Request) *workerv1.SamplingParams {
	sp := SamplingProto(req.Sampling)
	sp.Logprobs, sp.TopLogprobs = req.Logprobs, uint32(req.TopLogprobs)
	return sp
}

// LogprobsProto converts a token's logprobs for the wire; nil stays nil.
func LogprobsProto(lp *engine.TokenLogprobs) *workerv1.TokenLogprobs {
	if lp == nil {
		return nil
	}
	out := &workerv1.TokenLogprobs{Logprob: lp.Logprob, Top: make([]*workerv1.Logprob, len(lp.Top))}
	for i, t := range lp.Top {
		out.Top[i] = &workerv1.Logprob{TokenId: t.Token, Logprob: t.Logprob}
	}
	return out
}

// Logprobs converts a token's logprobs from the wire, keeping at most
// engine.MaxTopLogprobs alternatives; nil stays nil.
func Logprobs(p *workerv1.TokenLogprobs) *engine.TokenLogprobs {
	if p == nil {
		return nil
	}
	top := p.GetTop()[:min(len(p.GetTop()), engine.MaxTopLogprobs)]
	out := &engine.TokenLogprobs{Logprob: p.GetLogprob(), Top: make([]engine.Logprob, len(top))}
	for i, t := range top {
		out.Top[i] = engine.Logprob{Token: t.GetTokenId(), Logprob: t.GetLogprob()}
	}
	return out
}

// Sampling converts sampling parameters from the wire. A decode worker's own
// requests carry the same message.
func Sampling(p *workerv1.SamplingParams) engine.Sampling {
	return engine.Sampling{Temperature: p.GetTemperature(), TopP: p.GetTopP(), TopK: int(p.GetTopK()), Seed: p.GetSeed(),
		PresencePenalty: p.GetPresencePenalty(), FrequencyPenalty: p.GetFrequencyPenalty(), RepetitionPenalty: p.GetRepetitionPenalty(),
		LogitBias: p.GetLogitBias(), MinP: p.GetMinP(), Constraint: constraint(p.GetConstraint())}
}

func constraint(c *workerv1.Constraint) *engine.Constraint {
	if c == nil {
		return nil
	}
	return &engine.Constraint{JSONSchema: c.GetJsonSchema(), Prefix: c.GetPrefix(), Suffix: c.GetSuffix(),
		Repeat: c.GetRepeat(), Separator: c.GetSeparator()}
}

func constraintProto(c *engine.Constraint) *workerv1.Constraint {
	if c == nil {
		return nil
	}
	return &workerv1.Constraint{JsonSchema: c.JSONSchema, Prefix: c.Prefix, Suffix: c.Suffix,
		Repeat: c.Repeat, Separator: c.Separator}
}

// SamplingProto converts sampling parameters for the wire.
func SamplingProto(s engine.Sampling) *workerv1.SamplingParams {
	return &workerv1.SamplingParams{Temperature: s.Temperature, TopP: s.TopP, TopK: uint32(s.TopK), Seed: s.Seed,
		PresencePenalty: s.PresencePenalty, FrequencyPenalty: s.FrequencyPenalty, RepetitionPenalty: s.RepetitionPenalty,
		LogitBias: s.LogitBias, MinP: s.MinP, Constraint: constraintProto(s.Constraint)}
}

var dtypes = map[string]workerv1.KVDtype{
	"f32": workerv1.KVDtype_KV_DTYPE_F32, "f16": workerv1.KVDtype_KV_DTYPE_F16, "bf16": workerv1.KVDtype_KV_DTYPE_BF16,
}

// LayoutProto converts a KV layout for the wire: the header's, and the one a
// worker publishes in WorkerInfo so that peers know what KV it sends or takes.
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
