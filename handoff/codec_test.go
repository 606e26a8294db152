package handoff

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/internal/testutil"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
)

// The receiver reads chunks with its own codec, whose fast path takes a chunk's
// data as a slice of a buffer reused for the next message and leaves anything
// unusual to the standard proto codec. Chunks of both kinds in one stream (an
// unknown field added to two chunks in three, to the Chunk or to the
// PrefillResponse around it, as a newer prefill worker might send) must import as
// they would have been computed here.
func TestCodecMixedChunks(t *testing.T) {
	pe := handoffPrefillEngine(t)
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 7)
	p := &pipe{eng: pe, chunkBytes: 1, worker: "p-unknown", edit: func(i int, r *prefillv1.PrefillResponse) {
		c := r.GetChunk()
		switch {
		case c == nil:
		case i%3 == 1:
			c.ProtoReflect().SetUnknown(unknown)
		case i%3 == 2:
			r.ProtoReflect().SetUnknown(unknown)
		}
	}}
	ctx := context.Background()
	for i, n := range []int{17, 100, 150} {
		t.Run(fmt.Sprintf("len%d", n), func(t *testing.T) {
			req := engine.Request{ID: "mixed", Prompt: make([]uint32, n), Sampling: engine.Sampling{Temperature: 0.8, Seed: 5}, MaxTokens: 5}
			for j := range req.Prompt {
				req.Prompt[j] = uint32(60+i+j*31) % 1000
			}
			hc := &handoffCase{pool: 120}
			local, _ := receiver(t, hc)
			st, err := local.Generate(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			want := testutil.Drain(t, ctx, st)
			remote, _ := receiver(t, hc)
			out := fetch(t, ctx, p, remote, req, 0, 10*time.Second)
			if out.err != nil {
				t.Fatalf("Fetch through the codec: %v", out.err)
			}
			if got := testutil.Drain(t, ctx, out.st); !slices.Equal(got, want) || len(want) == 0 {
				t.Errorf("imported KV decodes to %v, local prefill to %v", got, want)
			}
		})
	}
	p.wait()
}
