package decode

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tandem-serve/tandem/engine"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
	"github.com/tandem-serve/tandem/wire"
)

// Prefillers resolves prefill worker ids through this worker's own discovery: a
// request names workers, never addresses.
type Prefillers interface {
	Client(workerID string) (prefillv1.PrefillServiceClient, bool)
	// IDs lists the known prefill workers, for when the router suggested none.
	IDs() []string
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// remoteError is a failed remote prefill, classified for the fallback ladder.
type remoteError struct {
	reason   string // label value, e.g. "crc_mismatch"
	beforeKV bool   // no KV block had arrived: another prefill worker may be tried
	err      error
}

func (e *remoteError) Error() string { return e.reason + ": " + e.err.Error() }
func (e *remoteError) Unwrap() error { return e.err }

func failed(reason string, beforeKV bool, format string, args ...any) *remoteError {
	return &remoteError{reason: reason, beforeKV: beforeKV, err: fmt.Errorf(format, args...)}
}

// handoff is what a successful remote prefill measured.
type handoff struct {
	workerID      string
	bytes         int
	blocks        int
	skipped       int
	prefillCached int // blocks the prefill worker had cached
	prefill       time.Duration
	queue         time.Duration
	transfer      time.Duration
	total         time.Duration
}

// remotePrefill runs the prompt on one prefill worker and imports its KV. The
// worker is sent the number of leading blocks this worker holds, so only the rest
// moves. Every chunk is checked (order, size, CRC32C) before the engine sees it;
// on any failure the import is aborted, which frees its blocks, and the stream's
// context is cancelled, which frees the prefill worker's.
func (s *Service) remotePrefill(reqCtx context.Context, client prefillv1.PrefillServiceClient, workerID string, req engine.Request, skip int, deadline time.Duration) (engine.Stream, *handoff, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(reqCtx, deadline)
	defer cancel()
	info := s.eng.Info()
	// Queued there until its header says the prefill is done. The whole prompt:
	// the prefill worker queues and counts all of it, whatever it then skips
	// sending.
	prefilled := s.pending.add(workerID, len(req.Prompt))
	defer prefilled()
	stream, err := client.Prefill(ctx, &prefillv1.PrefillRequest{
		RequestId: req.ID, PromptTokenIds: req.Prompt, Sampling: wire.SamplingProto(req.Sampling),
		SkipBlocks: uint32(skip), Lease: durationpb.New(deadline),
	}, grpc.ForceCodecV2(&chunkCodec{}))
	if err != nil {
		return nil, nil, classify(ctx, err, true)
	}
	msg, err := stream.Recv()
	prefilled()
	if err != nil {
		return nil, nil, classify(ctx, err, true)
	}
	h := msg.GetHeader()
	if h == nil {
		return nil, nil, failed("protocol_error", true, "first message is not a header")
	}
	n := (len(req.Prompt) + info.Layout.BlockSize - 1) / info.Layout.BlockSize
	switch {
	case wire.Layout(h.GetLayout()) != info.Layout:
		return nil, nil, failed("layout_mismatch", true, "prefill worker %s sends KV laid out as %v, this worker holds %v", workerID, wire.Layout(h.GetLayout()), info.Layout)
	case int(h.GetNumBlocks()) != n || int(h.GetSkippedBlocks()) > skip || int(h.GetSkippedBlocks()) >= n:
		return nil, nil, failed("protocol_error", true, "header promises %d blocks skipping %d, want %d skipping at most %d", h.GetNumBlocks(), h.GetSkippedBlocks(), n, skip)
	case int(h.GetFirstToken()) >= info.VocabSize:
		return nil, nil, failed("protocol_error", true, "first token %d outside the vocabulary", h.GetFirstToken())
	}
	imp, err := s.eng.Import(ctx, req, engine.ImportSpec{
		FirstToken: h.GetFirstToken(), NumBlocks: n, SkipBlocks: int(h.GetSkippedBlocks()), Layout: info.Layout,
		// Half of what is left: the other half is for receiving the KV, within the
		// same deadline as the prefill worker's lease.
		BlockWait: time.Until(start.Add(deadline)) / 2,
	})
	if errors.Is(err, engine.ErrNoBlocks) {
		// This worker's pool is full: another prefill worker would not help, and
		// would only spend another deadline before the same local fallback.
		return nil, nil, failed("import_no_blocks", false, "import: %v", err)
	}
	if err != nil {
		return nil, nil, failed("import_failed", true, "import: %v", err)
	}
	committed := false
	defer func() {
		if !committed {
			imp.Abort()
		}
	}()
	ho := &handoff{workerID: workerID, skipped: int(h.GetSkippedBlocks()), prefillCached: int(h.GetPrefillCachedBlocks())}
	next, bb := ho.skipped, info.Layout.BlockBytes
	transferStart := time.Now()
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil, nil, failed("remote_error_mid_transfer", next == ho.skipped, "stream ended at block %d of %d without a trailer", next, n)
		}
		if err != nil {
			return nil, nil, classify(ctx, err, next == ho.skipped)
		}
		if t := msg.GetTrailer(); t != nil {
			if next != n || int(t.GetBlocksSent()) != n-ho.skipped {
				return nil, nil, failed("block_gap", false, "trailer after block %d of %d (it says %d sent)", next, n, t.GetBlocksSent())
			}
			ho.prefill, ho.queue = t.GetPrefillTime().AsDuration(), t.GetQueueTime().AsDuration()
			break
		}
		c := msg.GetChunk()
		if c == nil {
			return nil, nil, failed("protocol_error", false, "second header in one stream")
		}
		count := int(c.GetBlockCount())
		switch {
		case int(c.GetFirstBlock()) != next:
			return nil, nil, failed("block_gap", false, "chunk starts at block %d, expected %d", c.GetFirstBlock(), next)
		case count < 1 || next+count > n || len(c.GetData()) != count*bb:
			return nil, nil, failed("protocol_error", false, "chunk of %d blocks with %d bytes at block %d of %d", count, len(c.GetData()), next, n)
		case crc32.Checksum(c.GetData(), castagnoli) != c.GetCrc32C():
			return nil, nil, failed("crc_mismatch", false, "chunk at block %d fails its CRC32C", next)
		}
		// c.Data belongs to the stream's codec and is overwritten by the next Recv:
		// WriteBlock copies it into the engine's blocks before then.
		for i := range count {
			if err := imp.WriteBlock(next+i, c.GetData()[i*bb:(i+1)*bb]); err != nil {
				return nil, nil, failed("import_failed", false, "block %d: %v", next+i, err)
			}
		}
		next += count
		ho.blocks += count
		ho.bytes += len(c.GetData())
	}
	ho.transfer = time.Since(transferStart)
	// The decode stream lives as long as the request; the deadline bounded only the handoff.
	st, err := imp.Commit(reqCtx)
	if err != nil {
		return nil, nil, failed("import_failed", false, "commit: %v", err)
	}
	committed = true
	ho.total = time.Since(start)
	return st, ho, nil
}

// classify names a stream error. A deadline is a timeout whatever arrived; a
// cancelled caller is not the prefill worker's fault and must not fall back.
func classify(ctx context.Context, err error, beforeKV bool) error {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded:
		return &remoteError{reason: "remote_timeout", beforeKV: false, err: err}
	case errors.Is(ctx.Err(), context.Canceled):
		// The client went away: not the prefill worker's fault, and nothing to
		// fall back for. (A Canceled status from the worker or a proxy while our
		// client is still here is an ordinary remote failure, below.)
		return err
	case beforeKV:
		return &remoteError{reason: "remote_error_before_kv", beforeKV: true, err: err}
	}
	return &remoteError{reason: "remote_error_mid_transfer", err: err}
}

// chunkCodec is the gRPC codec of one remote prefill stream. The default codec
// gathers each message's HTTP/2 frames into one buffer and then copies the bytes
// field out of it into a fresh allocation: two copies and a megabyte of garbage per
// chunk. This one gathers the frames into a buffer the stream owns and reuses, and
// decodes a chunk's data as a slice of it. A chunk is therefore valid only until
// the next Recv; remotePrefill checks and imports each chunk before asking for the
// next. Any message that is not a plain chunk (header, trailer, or a chunk with
// fields this worker does not know) is decoded by the standard proto codec, which
// copies what it keeps.
type chunkCodec struct {
	buf []byte
}

var protoCodec = encoding.GetCodecV2("proto")

// Name keeps the content type application/grpc+proto: the wire format is proto.
func (*chunkCodec) Name() string { return "proto" }

func (*chunkCodec) Marshal(v any) (mem.BufferSlice, error) { return protoCodec.Marshal(v) }

func (c *chunkCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*prefillv1.PrefillResponse)
	if !ok {
		return protoCodec.Unmarshal(data, v)
	}
	n := data.Len()
	if cap(c.buf) < n {
		// Headroom: a chunk's varints grow as the stream goes on.
		c.buf = make([]byte, n, n+n/8)
	}
	b := c.buf[:n]
	data.CopyTo(b)
	if chunk, ok := parseChunk(b); ok {
		m.Reset()
		m.Msg = &prefillv1.PrefillResponse_Chunk{Chunk: chunk}
		return nil
	}
	return proto.Unmarshal(b, m)
}

// parseChunk decodes b as a PrefillResponse holding exactly one chunk made only of
// Chunk's known fields, with its data aliasing b. Anything else reports false.
func parseChunk(b []byte) (*prefillv1.Chunk, bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != 2 || typ != protowire.BytesType {
		return nil, false
	}
	body, m := protowire.ConsumeBytes(b[n:])
	if m < 0 || n+m != len(b) {
		return nil, false
	}
	c := &prefillv1.Chunk{}
	for len(body) > 0 {
		num, typ, n := protowire.ConsumeTag(body)
		if n < 0 {
			return nil, false
		}
		body = body[n:]
		switch {
		case (num == 1 || num == 2) && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(body)
			if n < 0 {
				return nil, false
			}
			if num == 1 {
				c.FirstBlock = uint32(x)
			} else {
				c.BlockCount = uint32(x)
			}
			body = body[n:]
		case num == 3 && typ == protowire.BytesType:
			d, n := protowire.ConsumeBytes(body)
			if n < 0 {
				return nil, false
			}
			c.Data = d[:len(d):len(d)]
			body = body[n:]
		case num == 4 && typ == protowire.Fixed32Type:
			x, n := protowire.ConsumeFixed32(body)
			if n < 0 {
				return nil, false
			}
			c.Crc32C = x
			body = body[n:]
		default:
			return nil, false
		}
	}
	return c, true
}
