package prefill_test

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/sim"
	"github.com/tandem-serve/tandem/handoff"
	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	"github.com/tandem-serve/tandem/prefill"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
	"github.com/tandem-serve/tandem/proto/tandem/prefill/v1/prefillv1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

const prefillWorkerID = "prefill-test-1"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// client is one way to call Prefill: its whole stream, or the error it ended with.
type client = rpctest.Call[prefillv1.PrefillRequest, prefillv1.PrefillResponse]

func newEngine(t *testing.T) *sim.Engine {
	t.Helper()
	return newEngineAt(t, 0)
}

// newEngineAt is a sim engine whose modelled times are scaled by timeScale (0:
// no waiting).
func newEngineAt(t *testing.T, timeScale float64) *sim.Engine {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.TimeScale = timeScale
	eng, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	return eng
}

// chunkBytes makes chunks of 3 blocks of the sim's 1024-byte blocks (plus slack
// that must not turn into a fourth), so a prompt spans several chunks.
const chunkBytes = 3*1024 + 1000

// startPrefill serves a prefill service over a fresh sim engine and returns both
// clients and the engine.
func startPrefill(t *testing.T) ([]client, *sim.Engine) {
	t.Helper()
	eng := newEngine(t)
	svc := newService(t, eng)
	mux := http.NewServeMux()
	mux.Handle(prefillv1connect.NewPrefillServiceHandler(svc))
	clients := rpctest.ServeStream[prefillv1.PrefillRequest, prefillv1.PrefillResponse](t, mux, prefillv1connect.PrefillServicePrefillProcedure)
	// The KV transfer port's face: the same service on a grpc-go server.
	clients = append(clients, rpctest.GRPCCall[prefillv1.PrefillRequest, prefillv1.PrefillResponse](
		"grpc-server", grpcServe(t, svc), prefillv1connect.PrefillServicePrefillProcedure))
	return clients, eng
}

// newService is the prefill service the tests run over eng.
func newService(t *testing.T, eng *sim.Engine) *prefill.Service {
	t.Helper()
	svc, err := prefill.New(prefill.Config{WorkerID: prefillWorkerID, ChunkBytes: chunkBytes, MaxLease: 10 * time.Second, MaxPromptTokens: 4096},
		eng, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// grpcServe serves svc.GRPC() on a grpc-go server over loopback and returns a
// client connection to it.
func grpcServe(t *testing.T, svc *prefill.Service) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	prefillv1.RegisterPrefillServiceServer(gs, svc.GRPC())
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return rpctest.Dial(t, ln.Addr().String())
}

// localGenerate runs the same prompt on a sim engine of its own: the local path
// the remote one must agree with.
func localGenerate(t *testing.T, prompt []uint32, s *workerv1.SamplingParams, maxTokens uint32) []uint32 {
	t.Helper()
	stream, err := newEngine(t).Generate(rpctest.Context(t), engine.Request{Prompt: prompt, Sampling: handoff.Sampling(s), MaxTokens: int(maxTokens)})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var toks []uint32
	for {
		tok, err := stream.Next(rpctest.Context(t))
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, tok)
	}
	if len(toks) != int(maxTokens) {
		t.Fatalf("local Generate gave %d tokens, want %d", len(toks), maxTokens)
	}
	return toks
}

func prompt(n int, base uint32) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = base + uint32(i)*13
	}
	return p
}

type parsed struct {
	header  *prefillv1.Header
	chunks  []*prefillv1.Chunk
	trailer *prefillv1.Trailer
}

// check verifies the stream's framing against what the caller asked for and
// returns its parts: one header, chunks covering [skipped, num_blocks) in order with
// no gap or overlap, each with a correct CRC32C and length, then one trailer whose
// totals match.
func check(t *testing.T, msgs []*prefillv1.PrefillResponse, promptLen int) parsed {
	t.Helper()
	if len(msgs) < 3 {
		t.Fatalf("got %d messages, want header, chunks, trailer", len(msgs))
	}
	var p parsed
	p.header = msgs[0].GetHeader()
	if p.header == nil {
		t.Fatalf("first message is %T, want a header", msgs[0].GetMsg())
	}
	p.trailer = msgs[len(msgs)-1].GetTrailer()
	if p.trailer == nil {
		t.Fatalf("last message is %T, want a trailer", msgs[len(msgs)-1].GetMsg())
	}
	h := p.header
	layout := h.GetLayout()
	bs := int(h.GetBlockSize())
	if bs == 0 || layout.GetBlockSize() != h.GetBlockSize() || layout.GetBlockBytes() == 0 {
		t.Fatalf("header block size %d, layout %v", bs, layout)
	}
	if want := (promptLen + bs - 1) / bs; int(h.GetNumBlocks()) != want {
		t.Fatalf("num_blocks %d, want %d for %d tokens in blocks of %d", h.GetNumBlocks(), want, promptLen, bs)
	}
	if int(h.GetPromptTokens()) != promptLen {
		t.Errorf("prompt_tokens %d, want %d", h.GetPromptTokens(), promptLen)
	}
	if h.GetWorkerId() != prefillWorkerID {
		t.Errorf("worker_id %q, want %q", h.GetWorkerId(), prefillWorkerID)
	}
	next := h.GetSkippedBlocks()
	var bytes uint64
	for i, m := range msgs[1 : len(msgs)-1] {
		c := m.GetChunk()
		if c == nil {
			t.Fatalf("message %d is %T, want a chunk", i+1, m.GetMsg())
		}
		if c.GetFirstBlock() != next {
			t.Fatalf("chunk %d starts at block %d, want %d", i, c.GetFirstBlock(), next)
		}
		if c.GetBlockCount() == 0 {
			t.Fatalf("chunk %d is empty", i)
		}
		if uint64(len(c.GetData())) != uint64(c.GetBlockCount())*layout.GetBlockBytes() {
			t.Fatalf("chunk %d has %d bytes for %d blocks of %d", i, len(c.GetData()), c.GetBlockCount(), layout.GetBlockBytes())
		}
		if uint64(len(c.GetData())) > max(chunkBytes, layout.GetBlockBytes()) {
			t.Errorf("chunk %d has %d bytes, over the %d configured", i, len(c.GetData()), chunkBytes)
		}
		if got := crc32.Checksum(c.GetData(), castagnoli); got != c.GetCrc32C() {
			t.Fatalf("chunk %d crc32c %08x, data hashes to %08x", i, c.GetCrc32C(), got)
		}
		next += c.GetBlockCount()
		bytes += uint64(len(c.GetData()))
		p.chunks = append(p.chunks, c)
	}
	if next != h.GetNumBlocks() {
		t.Fatalf("chunks end at block %d, want num_blocks %d", next, h.GetNumBlocks())
	}
	if want := h.GetNumBlocks() - h.GetSkippedBlocks(); p.trailer.GetBlocksSent() != want {
		t.Errorf("trailer blocks_sent %d, want %d", p.trailer.GetBlocksSent(), want)
	}
	if p.trailer.GetBytesSent() != bytes {
		t.Errorf("trailer bytes_sent %d, chunks carried %d", p.trailer.GetBytesSent(), bytes)
	}
	return p
}

func TestPrefillStreamFraming(t *testing.T) {
	clients, eng := startPrefill(t)
	for _, c := range clients {
		for _, n := range []int{1, 16, 17, 100, 160} {
			t.Run(fmt.Sprintf("%s/%d_tokens", c.Name, n), func(t *testing.T) {
				msgs, err := c.Do(rpctest.Context(t), &prefillv1.PrefillRequest{RequestId: "p1", PromptTokenIds: prompt(n, 1)})
				if err != nil {
					t.Fatalf("Prefill of %d tokens: %v", n, err)
				}
				p := check(t, msgs, n)
				if p.header.GetSkippedBlocks() != 0 {
					t.Errorf("skipped %d blocks, none asked", p.header.GetSkippedBlocks())
				}
				if p.header.GetRequestId() != "p1" {
					t.Errorf("request_id %q, want p1", p.header.GetRequestId())
				}
				if got, want := handoff.Layout(p.header.GetLayout()), eng.Info().Layout; got != want {
					t.Errorf("layout %+v, engine has %+v", got, want)
				}
			})
		}
	}
	// Every exported block is released once the stream is over.
	if st := eng.Stats(); st.ActiveBlocks != 0 {
		t.Errorf("%d blocks still active after every prefill ended", st.ActiveBlocks)
	}
}

func TestPrefillSkipBlocks(t *testing.T) {
	clients, _ := startPrefill(t)
	const n = 100 // 7 blocks of 16
	for _, c := range clients {
		for _, tc := range []struct{ skip, want uint32 }{{0, 0}, {1, 1}, {4, 4}, {6, 6}, {7, 6}, {50, 6}} {
			t.Run(fmt.Sprintf("%s/skip_%d", c.Name, tc.skip), func(t *testing.T) {
				msgs, err := c.Do(rpctest.Context(t), &prefillv1.PrefillRequest{PromptTokenIds: prompt(n, 2), SkipBlocks: tc.skip})
				if err != nil {
					t.Fatal(err)
				}
				p := check(t, msgs, n)
				// Skipping every block still sends the last, whose tail the receiver lacks.
				if p.header.GetSkippedBlocks() != tc.want {
					t.Fatalf("skip_blocks %d: skipped %d, want %d", tc.skip, p.header.GetSkippedBlocks(), tc.want)
				}
				if p.chunks[0].GetFirstBlock() != tc.want {
					t.Fatalf("first chunk starts at %d, want %d", p.chunks[0].GetFirstBlock(), tc.want)
				}
			})
		}
	}
	// Skipped blocks change nothing about the blocks that are sent.
	full, err := clients[0].Do(rpctest.Context(t), &prefillv1.PrefillRequest{PromptTokenIds: prompt(n, 2)})
	if err != nil {
		t.Fatal(err)
	}
	part, err := clients[1].Do(rpctest.Context(t), &prefillv1.PrefillRequest{PromptTokenIds: prompt(n, 2), SkipBlocks: 3})
	if err != nil {
		t.Fatal(err)
	}
	fullData := blockData(check(t, full, n))
	partData := blockData(check(t, part, n))
	for i := 3; i < len(fullData); i++ {
		if !slices.Equal(fullData[i], partData[i]) {
			t.Fatalf("block %d differs when the first 3 are skipped", i)
		}
	}
}

// blockData splits the chunks into blocks, indexed by block number.
func blockData(p parsed) [][]byte {
	bb := int(p.header.GetLayout().GetBlockBytes())
	out := make([][]byte, p.header.GetNumBlocks())
	for _, c := range p.chunks {
		for k := range int(c.GetBlockCount()) {
			out[int(c.GetFirstBlock())+k] = c.GetData()[k*bb : (k+1)*bb]
		}
	}
	return out
}

// TestPrefillMatchesLocal is the identity between paths: the first token in the
// header, and the tokens a second engine decodes from the imported KV, are the
// tokens a local Generate gives for the same prompt and sampling.
func TestPrefillMatchesLocal(t *testing.T) {
	clients, _ := startPrefill(t)
	samplings := map[string]*workerv1.SamplingParams{
		"greedy":  {Temperature: 0},
		"sampled": {Temperature: 0.7, TopP: 0.9, Seed: 7},
	}
	const maxTokens = 8
	for _, c := range clients {
		for name, s := range samplings {
			t.Run(c.Name+"/"+name, func(t *testing.T) {
				p := prompt(70, 4)
				local := localGenerate(t, p, s, maxTokens)
				msgs, err := c.Do(rpctest.Context(t), &prefillv1.PrefillRequest{PromptTokenIds: p, Sampling: s})
				if err != nil {
					t.Fatal(err)
				}
				pr := check(t, msgs, len(p))
				if pr.header.GetFirstToken() != local[0] {
					t.Fatalf("header first_token %d, local Generate's first token %d", pr.header.GetFirstToken(), local[0])
				}

				dst := newEngine(t)
				req := engine.Request{Prompt: p, Sampling: handoff.Sampling(s), MaxTokens: maxTokens}
				imp, err := dst.Import(rpctest.Context(t), req, engine.ImportSpec{
					FirstToken: pr.header.GetFirstToken(), NumBlocks: int(pr.header.GetNumBlocks()),
					SkipBlocks: int(pr.header.GetSkippedBlocks()), Layout: handoff.Layout(pr.header.GetLayout()),
				})
				if err != nil {
					t.Fatalf("Import: %v", err)
				}
				t.Cleanup(imp.Abort)
				for i, b := range blockData(pr) {
					if err := imp.WriteBlock(i, b); err != nil {
						t.Fatalf("WriteBlock(%d): %v", i, err)
					}
				}
				stream, err := imp.Commit(rpctest.Context(t))
				if err != nil {
					t.Fatalf("Commit: %v", err)
				}
				t.Cleanup(stream.Close)
				var remote []uint32
				for {
					tok, err := stream.Next(rpctest.Context(t))
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
					remote = append(remote, tok)
				}
				if !slices.Equal(remote, local) {
					t.Fatalf("imported KV decodes to %v, local Generate gave %v", remote, local)
				}
				if stream.Finish() != engine.FinishLength {
					t.Errorf("imported stream finished %v, want length", stream.Finish())
				}
			})
		}
	}
}

func TestPrefillCorruptBlockRejected(t *testing.T) {
	clients, _ := startPrefill(t)
	for _, c := range clients {
		t.Run(c.Name, func(t *testing.T) {
			p := prompt(50, 8)
			msgs, err := c.Do(rpctest.Context(t), &prefillv1.PrefillRequest{PromptTokenIds: p})
			if err != nil {
				t.Fatal(err)
			}
			pr := check(t, msgs, len(p))
			blocks := blockData(pr)
			dst := newEngine(t)
			imp, err := dst.Import(rpctest.Context(t), engine.Request{Prompt: p, MaxTokens: 4}, engine.ImportSpec{
				FirstToken: pr.header.GetFirstToken(), NumBlocks: len(blocks), Layout: handoff.Layout(pr.header.GetLayout()),
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(imp.Abort)

			bad := slices.Clone(blocks[1])
			bad[len(bad)/2] ^= 0x01
			if crc32.Checksum(bad, castagnoli) == crc32.Checksum(blocks[1], castagnoli) {
				t.Fatal("CRC32C does not notice a flipped bit")
			}
			if err := imp.WriteBlock(1, bad); !errors.Is(err, engine.ErrBadBlock) {
				t.Fatalf("WriteBlock of a corrupted block: %v, want ErrBadBlock", err)
			}
			// A good block in the wrong place is as wrong as a damaged one.
			if err := imp.WriteBlock(2, blocks[1]); !errors.Is(err, engine.ErrBadBlock) {
				t.Fatalf("WriteBlock of block 1's bytes at 2: %v, want ErrBadBlock", err)
			}
			for i, b := range blocks {
				if i == 1 {
					continue
				}
				if err := imp.WriteBlock(i, b); err != nil {
					t.Fatalf("WriteBlock(%d): %v", i, err)
				}
			}
			// Block 1 never arrived intact, so decoding must not start.
			if _, err := imp.Commit(rpctest.Context(t)); !errors.Is(err, engine.ErrBadBlock) {
				t.Fatalf("Commit without block 1: %v, want ErrBadBlock", err)
			}
		})
	}
}

func TestPrefillInvalidArgument(t *testing.T) {
	clients, _ := startPrefill(t)
	for _, c := range clients {
		for name, req := range map[string]*prefillv1.PrefillRequest{
			"empty prompt":   {},
			"over the limit": {PromptTokenIds: prompt(4097, 0)},
		} {
			t.Run(c.Name+"/"+name, func(t *testing.T) {
				msgs, err := c.Do(rpctest.Context(t), req)
				if rpctest.Code(err) != connect.CodeInvalidArgument {
					t.Fatalf("got %d messages and error %v, want invalid_argument", len(msgs), err)
				}
				if !strings.Contains(err.Error(), "prompt_token_ids") {
					t.Errorf("error %q does not name prompt_token_ids", err)
				}
			})
		}
	}
}
