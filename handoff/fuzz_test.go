package handoff

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
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

// FuzzHandoff drives Fetch, the receiving half of a handoff, with a fake prefill
// worker whose stream is a program read from the fuzz input, against a real sim
// engine. Each op of the program is one thing a prefill worker or the network can
// do: a header, a chunk, a trailer (each either as the real Sender sends it or with
// one field damaged), an empty message, an error status, an early EOF, a stall, or
// the client going away. The healthy messages are the real Sender's, over the
// sim's real KV (a second sim engine's Prefill), so the fuzzer spends its time near
// valid handoffs rather than on random bytes the first check refuses. Every input
// also runs both halves together: the real Sender, at a chunk size the input picks,
// over an in-process pipe into Fetch, which must import exactly the sent KV.
//
// Input layout: promptLen picks the prompt (1..160 tokens, up to 10 blocks),
// cached how many leading blocks the receiving engine already holds (its high bit
// makes the caller claim more than it holds), poolBlocks the receiving engine's
// pool size (8..263 blocks: small pools make Import fail), program the ops.
//
//	go test ./handoff -run '^$' -fuzz FuzzHandoff -fuzztime 60s

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

// reasons are the labels a failure may have.
var reasons = []string{
	ReasonProtocol, ReasonLayout, ReasonImportFailed, ReasonImportNoBlocks, ReasonBlockGap, ReasonCRC,
	ReasonBeforeKV, ReasonMidTransfer, ReasonTimeout,
}

// handoffSeeds are the committed seeds, each with the outcome it must have: the
// reason Fetch gives, or "" for a successful import.
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
func TestHandoffSeeds(t *testing.T) {
	pe := handoffPrefillEngine(t)
	for _, sd := range handoffSeeds {
		t.Run(sd.name, func(t *testing.T) {
			out := runHandoffCase(t, pe, sd.promptLen, sd.cached, sd.poolBlocks, sd.program)
			var re *Error
			got := ""
			switch {
			case errors.As(out.err, &re):
				got = re.Reason
			case errors.Is(out.err, context.Canceled):
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
	pe, err := sim.New(cfg) // the sending side, for the real KV bytes
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = pe.Close() })
	return pe
}

// FuzzHandoff: see the top of this file; runHandoffCase and runPair say what each
// input must satisfy.
func FuzzHandoff(f *testing.F) {
	for _, sd := range handoffSeeds {
		f.Add(sd.promptLen, sd.cached, sd.poolBlocks, sd.program)
	}
	pe := handoffPrefillEngine(f)
	f.Fuzz(func(t *testing.T, promptLen, cached, poolBlocks uint8, program []byte) {
		runHandoffCase(t, pe, promptLen, cached, poolBlocks, program)
		runPair(t, pe, promptLen, cached, poolBlocks, program)
	})
}

// handoffOutcome is what Fetch returned.
type handoffOutcome struct {
	st  engine.Stream
	res *Result
	err error
}

// receiver is a fresh sim engine of pool blocks holding the first warm blocks of
// prompt, and how many it really holds.
func receiver(t *testing.T, hc *handoffCase) (*sim.Engine, int) {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.TimeScale, cfg.NumBlocks = 0, hc.pool
	eng, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	bs := eng.Info().Layout.BlockSize
	if hc.warm > 0 {
		exp, err := eng.Prefill(context.Background(), engine.Request{ID: "warm", Prompt: hc.prompt[:hc.warm*bs], MaxTokens: 1})
		if err == nil {
			exp.Release()
		}
	}
	return eng, eng.CachedPrefix(hc.prompt) / bs
}

// fetch runs Fetch against client, failing the test if it hangs.
func fetch(t *testing.T, ctx context.Context, client Client, eng *sim.Engine, req engine.Request, skip int, deadline time.Duration) handoffOutcome {
	t.Helper()
	done := make(chan handoffOutcome, 1)
	go func() {
		st, res, err := Fetch{Worker: "fuzz-prefill", Skip: skip, Deadline: deadline}.Run(ctx, client, eng, req)
		done <- handoffOutcome{st, res, err}
	}()
	select {
	case out := <-done:
		return out
	case <-time.After(30 * time.Second):
		buf := make([]byte, 1<<20)
		t.Fatalf("Fetch hung:\n%s", buf[:runtime.Stack(buf, true)])
	}
	return handoffOutcome{}
}

// drain reads st to the end and closes it.
func drain(t *testing.T, ctx context.Context, st engine.Stream) []uint32 {
	t.Helper()
	defer st.Close()
	var toks []uint32
	for {
		tok, err := st.Next(ctx)
		if errors.Is(err, io.EOF) {
			return toks
		}
		if err != nil {
			t.Fatalf("stream after a successful import: %v", err)
		}
		toks = append(toks, tok)
	}
}

// checkFailure checks that a failed fetch says why in a way the fallback ladder
// reads, and returned nothing else.
func checkFailure(t *testing.T, out handoffOutcome, cancelled bool) {
	t.Helper()
	var re *Error
	switch {
	case errors.As(out.err, &re):
		if !slices.Contains(reasons, re.Reason) || re.Err == nil {
			t.Errorf("handoff error %q with reason %q", out.err, re.Reason)
		}
	case cancelled && errors.Is(out.err, context.Canceled):
		// The client went away: not the prefill worker's fault, no fallback.
	default:
		t.Errorf("error %v (%T) is not a *handoff.Error", out.err, out.err)
	}
	if out.st != nil || out.res != nil {
		t.Errorf("failure %v also returned a stream or result", out.err)
	}
}

// checkIdle checks that eng holds nothing after a handoff, whatever its outcome.
func checkIdle(t *testing.T, eng *sim.Engine, err error) {
	t.Helper()
	if st := eng.Stats(); st.ActiveBlocks != 0 || st.Running != 0 || st.Waiting != 0 {
		t.Errorf("after the handoff (err %v) the engine holds %d active blocks, %d running, %d waiting", err, st.ActiveBlocks, st.Running, st.Waiting)
	}
}

// runHandoffCase plays one input's program against a fresh sim engine and checks
// everything the receiver promises: no panic or hang; a success only for a
// correct handoff, with a stream that yields the header's first token; a failure
// as an *Error with a known reason; no block left active either way; and the
// stream's context cancelled, so the prefill worker frees its KV too.
func runHandoffCase(t *testing.T, pe *sim.Engine, promptLen, cached, poolBlocks uint8, program []byte) handoffOutcome {
	t.Helper()
	hc := decodeHandoffCase(t, pe, promptLen, cached, poolBlocks, program)
	eng, held := receiver(t, hc)
	info := eng.Info()
	reqCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := &fakePrefillClient{hc: hc, reqCancel: cancel}
	deadline := 10 * time.Second
	if hc.hasStall {
		deadline = 20 * time.Millisecond
	}
	req := engine.Request{ID: "fuzz", Prompt: hc.prompt, MaxTokens: 4}
	out := fetch(t, reqCtx, client, eng, req, hc.skip, deadline)
	if client.stream != nil && client.stream.ctx.Err() == nil {
		t.Errorf("the stream's context is still live after Fetch returned: the prefill worker keeps its KV")
	}
	want, why := hc.expect(info, held)
	if out.err == nil {
		if out.st == nil || out.res == nil {
			t.Fatalf("success without a stream (%v) or result (%v)", out.st, out.res)
		}
		if !want {
			t.Errorf("accepted a handoff the protocol refuses (%s)", why)
		}
		n := len(hc.blocks)
		if r := out.res; r.Blocks != n-r.Skipped || r.Bytes != r.Blocks*info.Layout.BlockBytes || r.Skipped > hc.skip {
			t.Errorf("handoff of %d blocks, %d bytes, %d skipped; prompt has %d blocks, caller held %d", r.Blocks, r.Bytes, r.Skipped, n, hc.skip)
		}
		toks := drain(t, reqCtx, out.st)
		first := hc.steps[0].msg.GetHeader().GetFirstToken()
		if len(toks) != req.MaxTokens || toks[0] != first {
			t.Errorf("imported stream yields %v; want %d tokens starting with the header's %d", toks, req.MaxTokens, first)
		}
	} else {
		checkFailure(t, out, hc.hasCancel && reqCtx.Err() != nil)
		if want && hc.pool >= 64 { // 64 blocks hold any prompt here with room to spare
			t.Errorf("refused a correct handoff: %v", out.err)
		}
	}
	checkIdle(t, eng, out.err)
	return out
}

// runPair runs both halves together on one input: the real Sender, in chunks of
// 1 to 4 blocks as the program's length picks, over an in-process pipe into
// Fetch. Unless the caller claims blocks it lacks or its pool is too small, the
// handoff must succeed and decode from the Sender's first token; either way no
// block may stay active on either side.
func runPair(t *testing.T, pe *sim.Engine, promptLen, cached, poolBlocks uint8, program []byte) {
	t.Helper()
	hc := decodeHandoffCase(t, pe, promptLen, cached, poolBlocks, nil)
	eng, held := receiver(t, hc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	chunkBlocks := 1 + len(program)%4
	p := &pipe{eng: pe, chunkBytes: chunkBlocks * pe.Info().Layout.BlockBytes, worker: "fuzz-prefill"}
	req := engine.Request{ID: "fuzz-pair", Prompt: hc.prompt, MaxTokens: 4}
	out := fetch(t, ctx, p, eng, req, hc.skip, 10*time.Second)
	n := len(hc.blocks)
	skipped := min(hc.skip, n-1)
	if out.err != nil {
		checkFailure(t, out, false)
		if skipped <= held && hc.pool >= 64 {
			t.Errorf("Sender to Fetch, %d blocks, %d held, %d a chunk: %v", n, held, chunkBlocks, out.err)
		}
	} else {
		if skipped > held {
			t.Errorf("imported %d blocks on top of %d the engine does not hold", n-skipped, skipped-held)
		}
		if r := out.res; r.Skipped != skipped || r.Blocks != n-skipped || r.Bytes != r.Blocks*hc.layout.BlockBytes {
			t.Errorf("moved %d blocks (%d bytes) skipping %d; want %d skipping %d", r.Blocks, r.Bytes, r.Skipped, n-skipped, skipped)
		}
		first := hc.sent[0].GetHeader().GetFirstToken()
		if toks := drain(t, ctx, out.st); len(toks) != req.MaxTokens || toks[0] != first {
			t.Errorf("imported stream yields %v; want %d tokens starting with the Sender's %d", toks, req.MaxTokens, first)
		}
	}
	p.wait()
	checkIdle(t, eng, out.err)
	if st := pe.Stats(); st.ActiveBlocks != 0 {
		t.Errorf("the sending engine holds %d active blocks after the handoff (err %v)", st.ActiveBlocks, out.err)
	}
}
