package decode

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/sim"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/wire"
)

// FuzzRemotePrefillHandoff drives (*Service).remotePrefill, the decode side's checks of a
// KV handoff, with a fake prefill worker whose stream is a program read from the
// fuzz input, against a real sim engine. Each op of the program is one thing a
// prefill worker or the network can do: a header, a chunk, a trailer (each either
// as a healthy worker sends it or with one field damaged), an empty message, an
// error status, an early EOF, a stall, or the client going away. Chunk data is the
// sim's real KV (from a second sim engine's Prefill and AppendBlock, with the
// CRC32C a prefill worker computes), so the fuzzer spends its time near valid
// handoffs rather than on random bytes the first check refuses.
//
// Input layout: promptLen picks the prompt (1..160 tokens, up to 10 blocks),
// cached how many leading blocks the decode engine already holds (its high bit
// makes the caller claim more than it holds), poolBlocks the decode engine's
// pool size (8..263 blocks: small pools make Import fail), program the ops.
//
//	go test ./decode -run '^$' -fuzz FuzzRemotePrefillHandoff -fuzztime 60s

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
	warm      int // leading blocks of prompt the decode engine holds before the handoff
	skip      int // what the caller tells remotePrefill it holds
	pool      int
	callErr   error
	steps     []handoffStep
	blocks    [][]byte // the prompt's valid KV, block by block
	first     uint32   // the valid first token
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
	return &prefillv1.Chunk{FirstBlock: uint32(first), BlockCount: uint32(count), Data: data, Crc32C: crc32.Checksum(data, castagnoli)}
}

func (hc *handoffCase) validHeader() *prefillv1.Header {
	return &prefillv1.Header{
		RequestId: "fuzz", FirstToken: hc.first, PromptTokens: uint32(len(hc.prompt)),
		BlockSize: uint32(hc.layout.BlockSize), Layout: wire.LayoutProto(hc.layout),
		NumBlocks: uint32(len(hc.blocks)), SkippedBlocks: uint32(hc.skip), WorkerId: "fuzz-prefill",
	}
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

	exp, err := pe.Prefill(context.Background(), engine.Request{ID: "fuzz-ref", Prompt: hc.prompt, MaxTokens: 1})
	if err != nil {
		t.Fatalf("reference prefill: %v", err)
	}
	hc.first = exp.FirstToken()
	for i := range exp.NumBlocks() {
		b, err := exp.AppendBlock(nil, i)
		if err != nil {
			t.Fatal(err)
		}
		hc.blocks = append(hc.blocks, b)
	}
	exp.Release()

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
				c.Crc32C = crc32.Checksum(c.Data, castagnoli)
			case 3: // damaged on the wire: the CRC no longer matches
				c.Data[int(r.byte())%len(c.Data)] ^= 1 << (r.byte() % 8)
			case 4: // damaged before the CRC was computed: only the engine can tell
				c.Data[int(r.byte())%len(c.Data)] ^= 1 << (r.byte() % 8)
				c.Crc32C = crc32.Checksum(c.Data, castagnoli)
			case 5:
				c.Crc32C = r.u32()
			case 6: // the right bytes in the wrong place
				c = hc.validChunk(next+1, count)
				c.FirstBlock = uint32(next)
			case 7: // arbitrary bytes, correctly checksummed
				c.Data = r.bytes(int(r.byte()) * 16)
				c.Crc32C = crc32.Checksum(c.Data, castagnoli)
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
			hc.steps = append(hc.steps, handoffStep{msg: &prefillv1.PrefillResponse{Msg: &prefillv1.PrefillResponse_Trailer{Trailer: &prefillv1.Trailer{
				BlocksSent: sent, BytesSent: uint64(int(sent) * layout.BlockBytes),
				PrefillTime: durationpb.New(time.Millisecond), QueueTime: durationpb.New(0), TransferTime: durationpb.New(time.Millisecond),
			}}}})
		case hoEmpty:
			hc.steps = append(hc.steps, handoffStep{msg: &prefillv1.PrefillResponse{}})
		case hoError:
			// codes.Canceled is left out on purpose: remotePrefill passes a Canceled
			// status through as "the client went away" without asking its own context
			// (see the report on issue 9); a prefill worker or proxy that answers
			// Canceled therefore fails the request instead of falling back.
			errs := []error{
				status.Error(codes.Unavailable, "transport is closing"),
				status.Error(codes.Internal, "stream terminated by RST_STREAM with error code: INTERNAL_ERROR"),
				status.Error(codes.DeadlineExceeded, "receiver stalled past the lease"),
				status.Error(codes.ResourceExhausted, "prefill queue full"),
				status.Error(codes.Unknown, "unexpected EOF"),
				io.ErrUnexpectedEOF,
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

func (c *fakePrefillClient) Prefill(ctx context.Context, in *prefillv1.PrefillRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[prefillv1.PrefillResponse], error) {
	c.calls++
	if c.hc.callErr != nil {
		return nil, c.hc.callErr
	}
	c.stream = &fakePrefillStream{ctx: ctx, c: c}
	return c.stream, nil
}

type fakePrefillStream struct {
	grpc.ClientStream // not used by remotePrefill; nil so that a new use panics loudly
	ctx               context.Context
	c                 *fakePrefillClient
	recvd             int // steps played
}

func (s *fakePrefillStream) Recv() (*prefillv1.PrefillResponse, error) {
	if err := s.ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
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
		return nil, status.FromContextError(s.ctx.Err()).Err()
	case st.cancel:
		s.c.reqCancel()
		<-s.ctx.Done()
		return nil, status.FromContextError(s.ctx.Err()).Err()
	case st.err != nil:
		return nil, st.err
	}
	return st.msg, nil
}

func (s *fakePrefillStream) Context() context.Context     { return s.ctx }
func (s *fakePrefillStream) Header() (metadata.MD, error) { return nil, nil }
func (s *fakePrefillStream) Trailer() metadata.MD         { return nil }
func (s *fakePrefillStream) CloseSend() error             { return nil }

// expect replays the protocol the decode side must enforce, as the oracle: it
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
			case wire.Layout(h.GetLayout()) != info.Layout:
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

// remoteReasons are the labels remotePrefill may give a failure.
var remoteReasons = []string{
	"protocol_error", "layout_mismatch", "import_failed", "import_no_blocks", "block_gap", "crc_mismatch",
	"remote_error_before_kv", "remote_error_mid_transfer", "remote_timeout",
}

// handoffSeeds are the committed seeds, each with the outcome it must have: the
// reason remotePrefill gives, or "" for a successful import.
var handoffSeeds = []struct {
	name                          string
	promptLen, cached, poolBlocks uint8
	program                       []byte
	reason                        string
}{
	{"complete in chunks of 2", 70, 0, 120, []byte{hoHeader, hoChunk, 1, hoChunk, 1, hoChunk, 255, hoTrailer}, ""},
	{"complete with 2 blocks held", 100, 2, 120, []byte{hoHeader, hoChunk, 255, hoTrailer}, ""},
	{"one block", 0, 0, 120, []byte{hoHeader, hoChunk, 0, hoTrailer}, ""},
	{"bit flipped on the wire", 70, 0, 120, []byte{hoHeader, hoChunk, 1, hoBadChunk, 1, 3, 5, 2, hoChunk, 255, hoTrailer}, "crc_mismatch"},
	{"bit flipped before the CRC", 70, 0, 120, []byte{hoHeader, hoChunk, 1, hoBadChunk, 1, 4, 9, 1, hoChunk, 255, hoTrailer}, "import_failed"},
	{"block out of place", 70, 0, 120, []byte{hoHeader, hoBadChunk, 1, 6, hoChunk, 255, hoTrailer}, "import_failed"},
	{"chunk at the wrong block", 70, 0, 120, []byte{hoHeader, hoChunk, 1, hoBadChunk, 1, 0, 9, hoTrailer}, "block_gap"},
	{"chunk a byte short", 70, 0, 120, []byte{hoHeader, hoBadChunk, 0, 2, hoChunk, 255, hoTrailer}, "protocol_error"},
	{"trailer miscounts", 70, 0, 120, []byte{hoHeader, hoChunk, 255, hoBadTrailer, 3}, "block_gap"},
	{"trailer early", 70, 0, 120, []byte{hoHeader, hoChunk, 1, hoTrailer}, "block_gap"},
	{"header skips too much", 70, 0, 120, []byte{hoBadHeader, 5, 1, hoChunk, 255, hoTrailer}, "protocol_error"},
	{"header from other weights", 70, 0, 120, []byte{hoBadHeader, 2, hoChunk, 255, hoTrailer}, "layout_mismatch"},
	{"first token outside vocabulary", 70, 0, 120, []byte{hoBadHeader, 6, 0xff, 0xff, 0xff, 0xff, hoChunk, 255, hoTrailer}, "protocol_error"},
	{"chunk past the end", 70, 0, 120, []byte{hoHeader, hoChunk, 255, hoChunk, 0, hoTrailer}, "protocol_error"},
	{"two headers", 70, 0, 120, []byte{hoHeader, hoHeader, hoChunk, 255, hoTrailer}, "protocol_error"},
	{"empty message", 70, 0, 120, []byte{hoHeader, hoChunk, 1, hoEmpty, hoChunk, 255, hoTrailer}, "protocol_error"},
	{"chunk first", 70, 0, 120, []byte{hoChunk, 255, hoTrailer}, "protocol_error"},
	{"caller claims blocks it lacks", 70, 0x81, 120, []byte{hoHeader, hoChunk, 255, hoTrailer}, "import_failed"},
	{"pool too small", 150, 0, 0, []byte{hoHeader, hoChunk, 255, hoTrailer}, "import_no_blocks"},
	{"worker down", 70, 0, 120, []byte{hoCallError}, "remote_error_before_kv"},
	{"error before the header", 70, 0, 120, []byte{hoError, 0}, "remote_error_before_kv"},
	{"error before any block", 70, 0, 120, []byte{hoHeader, hoError, 1}, "remote_error_before_kv"},
	{"error mid-transfer", 70, 0, 120, []byte{hoHeader, hoChunk, 1, hoError, 1}, "remote_error_mid_transfer"},
	{"EOF mid-transfer", 70, 0, 120, []byte{hoHeader, hoChunk, 1, hoEOF}, "remote_error_mid_transfer"},
	{"stall", 70, 0, 120, []byte{hoHeader, hoChunk, 1, hoStall}, "remote_timeout"},
	{"client leaves", 70, 0, 120, []byte{hoHeader, hoChunk, 1, hoCancel}, "cancelled"},
	{"nothing at all", 70, 0, 120, []byte{}, "remote_error_before_kv"},
}

// The seeds exercise every outcome; each must have the one it was written for, so
// a change in the checks that the fuzz properties allow (a different reason, a
// retry allowed or not) is still caught.
func TestRemotePrefillHandoffSeeds(t *testing.T) {
	pe := handoffPrefillEngine(t)
	for _, sd := range handoffSeeds {
		t.Run(sd.name, func(t *testing.T) {
			out := runHandoffCase(t, pe, sd.promptLen, sd.cached, sd.poolBlocks, sd.program)
			var re *remoteError
			got := ""
			switch {
			case errors.As(out.err, &re):
				got = re.reason
			case status.Code(out.err) == codes.Canceled:
				got = "cancelled"
			case out.err != nil:
				got = out.err.Error()
			}
			if got != sd.reason {
				t.Errorf("outcome %q (%v), want %q", got, out.err, sd.reason)
			}
		})
	}
}

func handoffPrefillEngine(tb testing.TB) *sim.Engine {
	cfg := sim.DefaultConfig()
	cfg.TimeScale = 0
	pe, err := sim.New(cfg) // the prefill side, for the real KV bytes
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = pe.Close() })
	return pe
}

// FuzzRemotePrefillHandoff: see the top of this file; runHandoffCase says what
// each input must satisfy.
func FuzzRemotePrefillHandoff(f *testing.F) {
	for _, sd := range handoffSeeds {
		f.Add(sd.promptLen, sd.cached, sd.poolBlocks, sd.program)
	}
	pe := handoffPrefillEngine(f)
	f.Fuzz(func(t *testing.T, promptLen, cached, poolBlocks uint8, program []byte) {
		runHandoffCase(t, pe, promptLen, cached, poolBlocks, program)
	})
}

// handoffOutcome is what remotePrefill returned.
type handoffOutcome struct {
	st  engine.Stream
	ho  *handoff
	err error
}

// runHandoffCase plays one input against a fresh sim engine and checks everything
// the decode side promises: no panic or hang; a success only for a correct
// handoff, with a stream that yields the header's first token; a failure as a
// *remoteError with a known reason; no block left active either way; and the
// prefill stream's context cancelled, so the prefill worker frees its KV too.
func runHandoffCase(t *testing.T, pe *sim.Engine, promptLen, cached, poolBlocks uint8, program []byte) handoffOutcome {
	t.Helper()
	hc := decodeHandoffCase(t, pe, promptLen, cached, poolBlocks, program)
	dcfg := sim.DefaultConfig()
	dcfg.TimeScale, dcfg.NumBlocks = 0, hc.pool
	eng, err := sim.New(dcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	info := eng.Info()
	bs := info.Layout.BlockSize
	if hc.warm > 0 {
		exp, err := eng.Prefill(context.Background(), engine.Request{ID: "warm", Prompt: hc.prompt[:hc.warm*bs], MaxTokens: 1})
		if err == nil {
			exp.Release()
		}
	}
	held := eng.CachedPrefix(hc.prompt) / bs
	s, err := New(Config{
		WorkerID: "fuzz-decode", Mode: workerv1.WorkerMode_WORKER_MODE_DECODE, Params: Params{Policy: PolicyAlwaysRemote},
		MinRemoteDeadline: time.Millisecond, MaxRemoteDeadline: time.Minute,
	}, eng, nil, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}

	reqCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := &fakePrefillClient{hc: hc, reqCancel: cancel}
	deadline := 10 * time.Second
	if hc.hasStall {
		deadline = 20 * time.Millisecond
	}
	req := engine.Request{ID: "fuzz", Prompt: hc.prompt, MaxTokens: 4}
	done := make(chan handoffOutcome, 1)
	go func() {
		st, ho, err := s.remotePrefill(reqCtx, client, "fuzz-prefill", req, hc.skip, deadline)
		done <- handoffOutcome{st, ho, err}
	}()
	var out handoffOutcome
	select {
	case out = <-done:
	case <-time.After(30 * time.Second):
		buf := make([]byte, 1<<20)
		t.Fatalf("remotePrefill hung:\n%s", buf[:runtime.Stack(buf, true)])
	}

	if client.stream != nil && client.stream.ctx.Err() == nil {
		t.Errorf("the prefill stream's context is still live after remotePrefill returned: the prefill worker keeps its KV")
	}
	want, why := hc.expect(info, held)
	if out.err == nil {
		if out.st == nil || out.ho == nil {
			t.Fatalf("success without a stream (%v) or handoff (%v)", out.st, out.ho)
		}
		if !want {
			t.Errorf("accepted a handoff the protocol refuses (%s)", why)
		}
		n := len(hc.blocks)
		if ho := out.ho; ho.blocks != n-ho.skipped || ho.bytes != ho.blocks*info.Layout.BlockBytes || ho.skipped > hc.skip {
			t.Errorf("handoff of %d blocks, %d bytes, %d skipped; prompt has %d blocks, caller held %d", ho.blocks, ho.bytes, ho.skipped, n, hc.skip)
		}
		var toks []uint32
		for {
			tok, err := out.st.Next(reqCtx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("stream after a successful import: %v", err)
			}
			toks = append(toks, tok)
		}
		first := hc.steps[0].msg.GetHeader().GetFirstToken()
		if len(toks) != req.MaxTokens || toks[0] != first {
			t.Errorf("imported stream yields %v; want %d tokens starting with the header's %d", toks, req.MaxTokens, first)
		}
		out.st.Close()
	} else {
		var re *remoteError
		switch {
		case errors.As(out.err, &re):
			if !slices.Contains(remoteReasons, re.reason) || re.err == nil {
				t.Errorf("remote error %q with reason %q", out.err, re.reason)
			}
		case hc.hasCancel && reqCtx.Err() != nil && status.Code(out.err) == codes.Canceled:
			// The client went away: not the prefill worker's fault, no fallback.
		default:
			t.Errorf("error %v (%T) is not a *remoteError", out.err, out.err)
		}
		if want && hc.pool >= 64 { // 64 blocks hold any prompt here with room to spare
			t.Errorf("refused a correct handoff: %v", out.err)
		}
		if out.st != nil || out.ho != nil {
			t.Errorf("failure %v also returned a stream or handoff", out.err)
		}
	}
	if st := eng.Stats(); st.ActiveBlocks != 0 || st.Running != 0 || st.Waiting != 0 {
		t.Errorf("after the handoff (err %v) the engine holds %d active blocks, %d running, %d waiting", out.err, st.ActiveBlocks, st.Running, st.Waiting)
	}
	return out
}
