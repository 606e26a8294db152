package handoff

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandem-serve/tandem/engine"
)

// Reasons a handoff fails, as label values.
const (
	ReasonProtocol       = "protocol_error"            // a message out of order or malformed
	ReasonLayout         = "layout_mismatch"           // KV of another shape or other weights
	ReasonBlockGap       = "block_gap"                 // a block missing or out of place
	ReasonCRC            = "crc_mismatch"              // a chunk damaged in transit
	ReasonImportFailed   = "import_failed"             // the receiving engine refused the KV
	ReasonImportNoBlocks = "import_no_blocks"          // the receiving engine's pool is full
	ReasonBeforeKV       = "remote_error_before_kv"    // the stream failed before any block arrived
	ReasonMidTransfer    = "remote_error_mid_transfer" // the stream failed after some did
	ReasonTimeout        = "remote_timeout"            // the receiver's deadline ran out
)

// Error is a failed handoff, classified for the receiver's fallback ladder.
type Error struct {
	Reason string // one of the Reason constants
	// BeforeKV says no KV block had arrived: another prefill worker may be tried.
	BeforeKV bool
	Err      error
}

func (e *Error) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func failed(reason string, beforeKV bool, format string, args ...any) *Error {
	return &Error{Reason: reason, BeforeKV: beforeKV, Err: fmt.Errorf(format, args...)}
}

// classify names a stream error. A deadline is a timeout whatever arrived; a
// cancelled caller is not the prefill worker's fault and must not fall back, so
// its error is returned as it is.
func classify(ctx context.Context, err error, beforeKV bool) error {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded:
		return &Error{Reason: ReasonTimeout, Err: err}
	case errors.Is(ctx.Err(), context.Canceled):
		// The client went away: not the prefill worker's fault, and nothing to
		// fall back for. (A Canceled status from the worker or a proxy while our
		// client is still here is an ordinary remote failure, below.)
		return err
	case beforeKV:
		return &Error{Reason: ReasonBeforeKV, BeforeKV: true, Err: err}
	}
	return &Error{Reason: ReasonMidTransfer, Err: err}
}

// Want is what the receiver knows before the header arrives.
type Want struct {
	// Layout and VocabSize are the receiving engine's.
	Layout    engine.Layout
	VocabSize int
	// NumBlocks covers the prompt; MaxSkip is how many leading blocks the receiver
	// said it holds, the most the sender may skip.
	NumBlocks int
	MaxSkip   int
	// Worker names the prefill worker asked, in errors.
	Worker string
}

// Header is a handoff's header, checked against what the receiver wants.
type Header struct {
	FirstToken uint32
	// FirstLogprobs came with the first token, when the request asked.
	FirstLogprobs *engine.TokenLogprobs
	NumBlocks     int
	// Skipped leading blocks are not sent: the receiver holds them.
	Skipped int
	// PrefillCached blocks were already in the sender's prefix cache.
	PrefillCached int
	Layout        engine.Layout
}

// ImportSpec is what the receiving engine needs to take the header's KV, waiting
// at most blockWait for free blocks.
func (h Header) ImportSpec(blockWait time.Duration) engine.ImportSpec {
	return engine.ImportSpec{FirstToken: h.FirstToken, FirstLogprobs: h.FirstLogprobs, NumBlocks: h.NumBlocks, SkipBlocks: h.Skipped,
		Layout: h.Layout, BlockWait: blockWait}
}

// ReadHeader reads the first message, which must be a header that fits want.
func ReadHeader(ctx context.Context, s Stream, want Want) (Header, error) {
	msg, err := s.Recv()
	if err != nil {
		return Header{}, classify(ctx, err, true)
	}
	h := msg.GetHeader()
	if h == nil {
		return Header{}, failed(ReasonProtocol, true, "first message is not a header")
	}
	n := want.NumBlocks
	switch l := Layout(h.GetLayout()); {
	case l != want.Layout:
		return Header{}, failed(ReasonLayout, true, "prefill worker %s sends KV laid out as %v, this worker holds %v", want.Worker, l, want.Layout)
	case int(h.GetNumBlocks()) != n || int(h.GetSkippedBlocks()) > want.MaxSkip || int(h.GetSkippedBlocks()) >= n:
		return Header{}, failed(ReasonProtocol, true, "header promises %d blocks skipping %d, want %d skipping at most %d",
			h.GetNumBlocks(), h.GetSkippedBlocks(), n, want.MaxSkip)
	case int(h.GetFirstToken()) >= want.VocabSize:
		return Header{}, failed(ReasonProtocol, true, "first token %d outside the vocabulary", h.GetFirstToken())
	}
	for _, t := range h.GetFirstTokenLogprobs().GetTop() {
		if int(t.GetTokenId()) >= want.VocabSize {
			return Header{}, failed(ReasonProtocol, true, "first token's top logprob names token %d, outside the vocabulary", t.GetTokenId())
		}
	}
	return Header{
		FirstToken: h.GetFirstToken(), FirstLogprobs: Logprobs(h.GetFirstTokenLogprobs()), NumBlocks: n, Skipped: int(h.GetSkippedBlocks()),
		PrefillCached: int(h.GetPrefillCachedBlocks()), Layout: want.Layout,
	}, nil
}

// Stats is what a received handoff moved, and the sender's timings.
type Stats struct {
	Blocks, Bytes int
	// Prefill and Queue are the sender's, from the trailer.
	Prefill, Queue time.Duration
	// Transfer is the time from the first chunk to the trailer, measured here.
	Transfer time.Duration
}

// Receive reads the chunks that follow h and the trailer, checking each chunk's
// place, size and CRC32C before writing its blocks into imp. It neither commits nor
// aborts imp: on success the caller commits, on failure it aborts.
func Receive(ctx context.Context, s Stream, h Header, imp engine.Importer) (Stats, error) {
	var st Stats
	n, next, bb := h.NumBlocks, h.Skipped, h.Layout.BlockBytes
	start := time.Now()
	for {
		msg, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return Stats{}, failed(ReasonMidTransfer, next == h.Skipped, "stream ended at block %d of %d without a trailer", next, n)
		}
		if err != nil {
			return Stats{}, classify(ctx, err, next == h.Skipped)
		}
		if t := msg.GetTrailer(); t != nil {
			if next != n || int(t.GetBlocksSent()) != n-h.Skipped {
				return Stats{}, failed(ReasonBlockGap, false, "trailer after block %d of %d (it says %d sent)", next, n, t.GetBlocksSent())
			}
			st.Prefill, st.Queue = t.GetPrefillTime().AsDuration(), t.GetQueueTime().AsDuration()
			break
		}
		c := msg.GetChunk()
		if c == nil {
			return Stats{}, failed(ReasonProtocol, false, "second header in one stream")
		}
		count := int(c.GetBlockCount())
		switch {
		case int(c.GetFirstBlock()) != next:
			return Stats{}, failed(ReasonBlockGap, false, "chunk starts at block %d, expected %d", c.GetFirstBlock(), next)
		case count < 1 || next+count > n || len(c.GetData()) != count*bb:
			return Stats{}, failed(ReasonProtocol, false, "chunk of %d blocks with %d bytes at block %d of %d", count, len(c.GetData()), next, n)
		case checksum(c.GetData()) != c.GetCrc32C():
			return Stats{}, failed(ReasonCRC, false, "chunk at block %d fails its CRC32C", next)
		}
		// The chunk's data may belong to the stream's codec and be overwritten by
		// the next Recv: WriteBlock copies it into the engine's blocks before then.
		for i := range count {
			if err := imp.WriteBlock(next+i, c.GetData()[i*bb:(i+1)*bb]); err != nil {
				return Stats{}, failed(ReasonImportFailed, false, "block %d: %v", next+i, err)
			}
		}
		next += count
		st.Blocks += count
		st.Bytes += len(c.GetData())
	}
	st.Transfer = time.Since(start)
	return st, nil
}
