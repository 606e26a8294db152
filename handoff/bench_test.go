package handoff

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/native"
	"github.com/tandem-serve/tandem/internal/testutil/poolengine"
)

// BenchmarkPipe is the protocol's own cost, both halves together with no network:
// the real Sender reading blocks out of a pool of the small model's layout, proto
// marshalling, the receiver's codec, its checks and CRC32C, and the copy into the
// receiving pool (the in-process pipe of pipe_test.go). The end-to-end figures,
// through gRPC and the decode and prefill services, are decode's BenchmarkHandoff.
//
//	go test -run '^$' -bench Pipe -benchtime 20x ./handoff/
func BenchmarkPipe(b *testing.B) {
	ne, err := native.New(native.Config{Model: "small", Seed: 7, NumBlocks: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	layout := ne.Info().Layout
	ne.Close()
	const maxTokens = 16384
	pe, de := poolengine.New(layout, maxTokens/layout.BlockSize), poolengine.New(layout, maxTokens/layout.BlockSize)
	p := &pipe{eng: pe, chunkBytes: 1 << 20, worker: "p0"}
	defer p.wait()
	for _, n := range []int{1024, 4096, maxTokens} {
		b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
			req := engine.Request{ID: "bench", Prompt: make([]uint32, n), MaxTokens: 1}
			bytes := n / layout.BlockSize * layout.BlockBytes
			b.SetBytes(int64(bytes))
			for b.Loop() {
				st, res, err := Fetch{Worker: "p0", Deadline: time.Minute}.Run(context.Background(), p, de, req)
				if err != nil {
					b.Fatal(err)
				}
				if res.Bytes != bytes {
					b.Fatalf("moved %d bytes, want %d", res.Bytes, bytes)
				}
				if _, err := st.Next(context.Background()); err != nil && err != io.EOF {
					b.Fatal(err)
				}
				st.Close()
			}
		})
	}
}
