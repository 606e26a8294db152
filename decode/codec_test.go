package decode_test

import (
	"context"
	"fmt"
	"hash/crc32"
	"net/http"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/internal/h2ctest"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
	"github.com/tandem-serve/tandem/proto/tandem/prefill/v1/prefillv1connect"
	"github.com/tandem-serve/tandem/wire"
)

// unknownFieldsPrefill serves Prefill as prefill.Service does, one block per chunk,
// but adds an unknown field to two chunks in three: to the Chunk, or to the
// PrefillResponse around it, as a newer prefill worker might.
type unknownFieldsPrefill struct {
	prefillv1connect.UnimplementedPrefillServiceHandler
	eng engine.Engine
}

func (u *unknownFieldsPrefill) Prefill(ctx context.Context, req *connect.Request[prefillv1.PrefillRequest], stream *connect.ServerStream[prefillv1.PrefillResponse]) error {
	m := req.Msg
	exp, err := u.eng.Prefill(ctx, engine.Request{ID: m.GetRequestId(), Prompt: m.GetPromptTokenIds(), Sampling: wire.Sampling(m.GetSampling()), MaxTokens: 1})
	if err != nil {
		return err
	}
	defer exp.Release()
	layout, n := u.eng.Info().Layout, exp.NumBlocks()
	skip := min(int(m.GetSkipBlocks()), n-1)
	err = stream.Send(&prefillv1.PrefillResponse{Msg: &prefillv1.PrefillResponse_Header{Header: &prefillv1.Header{
		RequestId: m.GetRequestId(), FirstToken: exp.FirstToken(), PromptTokens: uint32(len(m.GetPromptTokenIds())),
		BlockSize: uint32(layout.BlockSize), Layout: wire.LayoutProto(layout), NumBlocks: uint32(n), SkippedBlocks: uint32(skip),
	}}})
	if err != nil {
		return err
	}
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 7)
	table := crc32.MakeTable(crc32.Castagnoli)
	for i := skip; i < n; i++ {
		data, err := exp.AppendBlock(nil, i)
		if err != nil {
			return err
		}
		c := &prefillv1.Chunk{FirstBlock: uint32(i), BlockCount: 1, Data: data, Crc32C: crc32.Checksum(data, table)}
		r := &prefillv1.PrefillResponse{Msg: &prefillv1.PrefillResponse_Chunk{Chunk: c}}
		switch i % 3 {
		case 1:
			c.ProtoReflect().SetUnknown(unknown)
		case 2:
			r.ProtoReflect().SetUnknown(unknown)
		}
		if err := stream.Send(r); err != nil {
			return err
		}
	}
	return stream.Send(&prefillv1.PrefillResponse{Msg: &prefillv1.PrefillResponse_Trailer{Trailer: &prefillv1.Trailer{
		BlocksSent: uint32(n - skip), BytesSent: uint64((n - skip) * layout.BlockBytes),
	}}})
}

// The decode worker reads chunks with its own codec (decode/remote.go), whose fast
// path takes a chunk's data as a slice of a buffer reused for the next message and
// leaves anything unusual to the standard proto codec. Chunks of both kinds in one
// stream must import as they would have been computed here.
func TestHandoffCodecMixedChunks(t *testing.T) {
	ctx := context.Background()
	mux := http.NewServeMux()
	mux.Handle(prefillv1connect.NewPrefillServiceHandler(&unknownFieldsPrefill{eng: newNative(t)}))
	srv := h2ctest.NewServer(t, mux)
	pf := &staticPrefillers{}
	pf.add("p-unknown", grpcPrefillClient(t, srv.Listener.Addr().String()))
	remote := startDecode(t, newNative(t), pf, alwaysRemote, 30*time.Second, time.Minute)
	local := startDecode(t, newNative(t), nil, alwaysLocal, time.Second, 30*time.Second)
	for i, n := range []int{17, 100, 250} {
		name := fmt.Sprintf("len%d", n)
		p := prompt(60+i, n)
		want, err := generate(t, ctx, local.client, request(name+"-local", p, 0.8, 5))
		if err != nil {
			t.Fatalf("%s local: %v", name, err)
		}
		got, err := generate(t, ctx, remote.client, request(name+"-remote", p, 0.8, 5, "p-unknown"))
		if err != nil {
			t.Fatalf("%s remote: %v", name, err)
		}
		if got.decision.GetPath() != decodev1.PrefillPath_PREFILL_PATH_REMOTE {
			t.Fatalf("%s: path %v (%s), want remote", name, got.decision.GetPath(), got.decision.GetDetail())
		}
		if !slices.Equal(got.tokens, want.tokens) || len(want.tokens) == 0 {
			t.Errorf("%s: remote tokens %v, local tokens %v", name, got.tokens, want.tokens)
		}
	}
}
