package handoff

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/sim"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// The fuzz input decoded into a prefill worker's program, and the oracle: see
// FuzzHandoff.

// Op codes, the program's first byte of each op modulo hoOps.
const (
	hoHeader     = iota // a header as a healthy prefill worker sends it
	hoBadHeader         // a header with one field damaged (next byte: which, then its value)
	hoChunk             // the next chunk (next byte: one less than its blocks, capped at what is left)
	hoBadChunk          // the next chunk with one thing damaged (next bytes: count, what)
	hoTrailer           // a trailer as a healthy worker sends it
	hoBadTrailer        // a trailer whose blocks_sent is the next byte
	hoEmpty             // a PrefillResponse with no message set
	hoError             // an error status (next byte: which)
	hoEOF               // the stream ends
	hoStall             // the worker sends nothing more; the handoff's deadline ends it
	hoCancel            // the client goes away: the request's context is cancelled
	hoCallError         // Prefill itself fails (only as the first op; later, a healthy chunk)
	hoOps
)

// handoffStep is one thing the fake stream does on Recv.
type handoffStep struct {
	msg    *prefillv1.PrefillResponse
	err    error
	stall  bool
	cancel bool
}

// handoffCase is one fuzz input, decoded.
type handoffCase struct {
	prompt    []uint32
	warm      int // leading blocks of prompt the receiving engine holds before the handoff
	skip      int // what the caller tells Fetch it holds
	pool      int
	callErr   error
	steps     []handoffStep
	sent      []*prefillv1.PrefillResponse // the real Sender's messages, a block a chunk, none skipped
	blocks    [][]byte                     // the prompt's valid KV, block by block
	layout    engine.Layout
	hasStall  bool
	hasCancel bool
}

type byteReader struct {
	b []byte
}

func (r *byteReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *byteReader) u32() uint32 {
	var b [4]byte
	for i := range b {
		b[i] = r.byte()
	}
	return binary.LittleEndian.Uint32(b[:])
}

func (r *byteReader) bytes(n int) []byte {
	n = min(n, len(r.b))
	out := slices.Clone(r.b[:n])
	r.b = r.b[n:]
	return out
}

func chunkMsg(c *prefillv1.Chunk) *prefillv1.PrefillResponse {
	return &prefillv1.PrefillResponse{Msg: &prefillv1.PrefillResponse_Chunk{Chunk: c}}
}

// validChunk is blocks [first, first+count) as a healthy prefill worker sends them;
// blocks past the prompt's end repeat its last block.
func (hc *handoffCase) validChunk(first, count int) *prefillv1.Chunk {
	var data []byte
	for i := first; i < first+count; i++ {
		data = append(data, hc.blocks[min(max(i, 0), len(hc.blocks)-1)]...)
	}
	return &prefillv1.Chunk{FirstBlock: uint32(first), BlockCount: uint32(count), Data: data, Crc32C: checksum(data)}
}

// validHeader is the real Sender's header, for a receiver holding hc.skip blocks.
func (hc *handoffCase) validHeader() *prefillv1.Header {
	h := proto.Clone(hc.sent[0].GetHeader()).(*prefillv1.Header)
	h.SkippedBlocks = uint32(hc.skip)
	return h
}

// validTrailer is the real Sender's trailer, saying sent blocks were sent.
func (hc *handoffCase) validTrailer(sent int) *prefillv1.Trailer {
	t := proto.Clone(hc.sent[len(hc.sent)-1].GetTrailer()).(*prefillv1.Trailer)
	t.BlocksSent, t.BytesSent = uint32(sent), uint64(sent*hc.layout.BlockBytes)
	return t
}

// sendAll is what the real Sender sends for prompt from a fresh export on pe, to a
// receiver holding skip blocks, in chunks of chunkBlocks.
func sendAll(tb testing.TB, pe *sim.Engine, prompt []uint32, skip, chunkBlocks int) []*prefillv1.PrefillResponse {
	tb.Helper()
	exp, err := pe.Prefill(context.Background(), engine.Request{ID: "fuzz-ref", Prompt: prompt, MaxTokens: 1})
	if err != nil {
		tb.Fatalf("reference prefill: %v", err)
	}
	defer exp.Release()
	layout := pe.Info().Layout
	var out []*prefillv1.PrefillResponse
	snd := Sender{ChunkBytes: chunkBlocks * layout.BlockBytes, Lease: time.Minute}
	_, err = snd.Send(exp, Meta{RequestID: "fuzz", WorkerID: "fuzz-prefill", PromptTokens: len(prompt), Layout: layout, SkipBlocks: skip},
		func(r *prefillv1.PrefillResponse) error {
			// The Sender reuses its chunk buffer, as a transport that has serialized
			// the message by the time send returns allows.
			out = append(out, proto.Clone(r).(*prefillv1.PrefillResponse))
			return nil
		})
	if err != nil {
		tb.Fatalf("reference send: %v", err)
	}
	return out
}

// decodeHandoffCase builds the case: the prompt, its valid KV from pe, and the steps.
func decodeHandoffCase(t *testing.T, pe *sim.Engine, promptLen, cached, poolBlocks uint8, program []byte) *handoffCase {
	layout := pe.Info().Layout
	bs := layout.BlockSize
	hc := &handoffCase{layout: layout, pool: 8 + int(poolBlocks)}
	hc.prompt = make([]uint32, 1+int(promptLen)%160)
	for i := range hc.prompt {
		hc.prompt[i] = uint32(i*7919+int(promptLen)*104729) % 100000
	}
	n := (len(hc.prompt) + bs - 1) / bs
	// At most n-1 blocks can be held: the last token is always computed.
	hc.warm = int(cached&0x7f) % n
	hc.skip = hc.warm
	if cached&0x80 != 0 {
		hc.skip += 1 + int(cached>>5&3)
	}

	hc.sent = sendAll(t, pe, hc.prompt, 0, 1)
	for _, m := range hc.sent[1 : len(hc.sent)-1] {
		hc.blocks = append(hc.blocks, m.GetChunk().GetData())
	}

	r := &byteReader{b: program}
	next := hc.skip // the block a healthy worker would send next
	for len(r.b) > 0 && len(hc.steps) < 64 {
		op := r.byte() % hoOps
		if op == hoCallError && len(hc.steps) == 0 && hc.callErr == nil {
			hc.callErr = status.Error(codes.Unavailable, "connection refused")
			continue
		}
		switch op {
		case hoHeader:
			hc.steps = append(hc.steps, handoffStep{msg: &prefillv1.PrefillResponse{Msg: &prefillv1.PrefillResponse_Header{Header: hc.validHeader()}}})
		case hoBadHeader:
			h := hc.validHeader()
			l := h.Layout
			switch r.byte() % 10 {
			case 0:
				l.Layers++
			case 1:
				l.BlockBytes = uint64(r.u32())
			case 2:
				l.ModelFingerprint += "x"
			case 3:
				l.Dtype = workerv1.KVDtype(r.byte())
			case 4:
				h.NumBlocks = uint32(r.byte())
			case 5:
				h.SkippedBlocks = uint32(r.byte())
			case 6:
				h.FirstToken = r.u32()
			case 7:
				h.Layout = nil
			case 8:
				h.BlockSize = uint32(r.byte())
				l.BlockSize = h.BlockSize
			case 9:
				h.PrefillCachedBlocks = r.u32()
			}
			hc.steps = append(hc.steps, handoffStep{msg: &prefillv1.PrefillResponse{Msg: &prefillv1.PrefillResponse_Header{Header: h}}})
		case hoChunk, hoCallError:
			count := max(1, min(1+int(r.byte()), len(hc.blocks)-next))
			hc.steps = append(hc.steps, handoffStep{msg: chunkMsg(hc.validChunk(next, count))})
			next += count
		case hoBadChunk:
			count := max(1, min(1+int(r.byte()), len(hc.blocks)-next))
			c := hc.validChunk(next, count)
			switch r.byte() % 9 {
			case 0:
				c.FirstBlock = uint32(r.byte())
			case 1:
				c.BlockCount = uint32(r.byte())
			case 2: // a byte short
				c.Data = c.Data[:len(c.Data)-1]
				c.Crc32C = checksum(c.Data)
			case 3: // damaged on the wire: the CRC no longer matches
				c.Data[int(r.byte())%len(c.Data)] ^= 1 << (r.byte() % 8)
			case 4: // damaged before the CRC was computed: only the engine can tell
				c.Data[int(r.byte())%len(c.Data)] ^= 1 << (r.byte() % 8)
				c.Crc32C = checksum(c.Data)
			case 5:
				c.Crc32C = r.u32()
			case 6: // the right bytes in the wrong place
				c = hc.validChunk(next+1, count)
				c.FirstBlock = uint32(next)
			case 7: // arbitrary bytes, correctly checksummed
				c.Data = r.bytes(int(r.byte()) * 16)
				c.Crc32C = checksum(c.Data)
			case 8:
				c.Data = nil
				c.Crc32C = 0
			}
			hc.steps = append(hc.steps, handoffStep{msg: chunkMsg(c)})
			next += count
		case hoTrailer, hoBadTrailer:
			sent := uint32(len(hc.blocks) - hc.skip)
			if op == hoBadTrailer {
				sent = uint32(r.byte())
			}
			hc.steps = append(hc.steps, handoffStep{msg: &prefillv1.PrefillResponse{Msg: &prefillv1.PrefillResponse_Trailer{Trailer: hc.validTrailer(int(sent))}}})
		case hoEmpty:
			hc.steps = append(hc.steps, handoffStep{msg: &prefillv1.PrefillResponse{}})
		case hoError:
			// A Canceled status while the caller is still there (a proxy, or the
			// worker shutting down) is a remote failure like the others.
			errs := []error{
				status.Error(codes.Unavailable, "transport is closing"),
				status.Error(codes.Internal, "stream terminated by RST_STREAM with error code: INTERNAL_ERROR"),
				status.Error(codes.DeadlineExceeded, "receiver stalled past the lease"),
				status.Error(codes.ResourceExhausted, "prefill queue full"),
				status.Error(codes.Unknown, "unexpected EOF"),
				io.ErrUnexpectedEOF,
				status.Error(codes.Canceled, "context canceled"),
			}
			hc.steps = append(hc.steps, handoffStep{err: errs[int(r.byte())%len(errs)]})
		case hoEOF:
			hc.steps = append(hc.steps, handoffStep{err: io.EOF})
		case hoStall:
			hc.steps = append(hc.steps, handoffStep{stall: true})
			hc.hasStall = true
		case hoCancel:
			hc.steps = append(hc.steps, handoffStep{cancel: true})
			hc.hasCancel = true
		}
	}
	return hc
}

// fakePrefillClient is a prefill worker that plays hc's steps.
type fakePrefillClient struct {
	hc        *handoffCase
	reqCancel context.CancelFunc
	stream    *fakePrefillStream
	calls     int
}

func (c *fakePrefillClient) Prefill(ctx context.Context, _ *prefillv1.PrefillRequest) (Stream, error) {
	c.calls++
	if c.hc.callErr != nil {
		return nil, c.hc.callErr
	}
	c.stream = &fakePrefillStream{ctx: ctx, c: c}
	return c.stream, nil
}

type fakePrefillStream struct {
	ctx   context.Context
	c     *fakePrefillClient
	recvd int // steps played
}

func (s *fakePrefillStream) Recv() (*prefillv1.PrefillResponse, error) {
	if err := s.ctx.Err(); err != nil {
		return nil, err
	}
	if s.recvd >= len(s.c.hc.steps) {
		s.recvd++
		return nil, io.EOF
	}
	st := s.c.hc.steps[s.recvd]
	s.recvd++
	switch {
	case st.stall:
		<-s.ctx.Done()
		return nil, s.ctx.Err()
	case st.cancel:
		s.c.reqCancel()
		<-s.ctx.Done()
		return nil, s.ctx.Err()
	case st.err != nil:
		return nil, st.err
	}
	return st.msg, nil
}

// expect replays the protocol the receiver must enforce, as the oracle: it
// reports whether the steps, read until the first one that ends the stream, form a
// complete and correct handoff for an engine holding held leading blocks.
func (hc *handoffCase) expect(info engine.Info, held int) (ok bool, why string) {
	if hc.callErr != nil {
		return false, "Prefill failed"
	}
	n := len(hc.blocks)
	next, skipped := -1, 0
	for i, st := range hc.steps {
		if st.err != nil || st.stall || st.cancel {
			return false, fmt.Sprintf("step %d ends the stream", i)
		}
		switch m := st.msg.Msg.(type) {
		case *prefillv1.PrefillResponse_Header:
			h := m.Header
			switch {
			case next >= 0:
				return false, "second header"
			case Layout(h.GetLayout()) != info.Layout:
				return false, "layout"
			case int(h.GetNumBlocks()) != n:
				return false, "num_blocks"
			case int(h.GetSkippedBlocks()) > hc.skip || int(h.GetSkippedBlocks()) > held || int(h.GetSkippedBlocks()) >= n:
				return false, "skipped_blocks"
			case int(h.GetFirstToken()) >= info.VocabSize:
				return false, "first_token"
			}
			skipped = int(h.GetSkippedBlocks())
			next = skipped
		case *prefillv1.PrefillResponse_Chunk:
			c := m.Chunk
			if next < 0 {
				return false, "chunk before header"
			}
			count := int(c.GetBlockCount())
			if int(c.GetFirstBlock()) != next || count < 1 || next+count > n {
				return false, "chunk placement"
			}
			want := hc.validChunk(next, count)
			if !bytes.Equal(c.GetData(), want.GetData()) || c.GetCrc32C() != want.GetCrc32C() {
				return false, "chunk data"
			}
			next += count
		case *prefillv1.PrefillResponse_Trailer:
			if next != n || int(m.Trailer.GetBlocksSent()) != n-skipped {
				return false, "trailer"
			}
			return true, ""
		default:
			return false, fmt.Sprintf("step %d is empty", i)
		}
	}
	return false, "no trailer"
}
