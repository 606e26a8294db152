package handoff

import (
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tandem-serve/tandem/engine"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
)

// Sender streams one export's KV. HTTP/2 flow control (or whatever the send
// function blocks on) keeps only a window's worth of chunks in flight.
type Sender struct {
	// ChunkBytes is the target size of one chunk; whole blocks, at least one.
	ChunkBytes int
	// Lease caps how long the export may wait for a stalled receiver.
	Lease time.Duration
	// LeaseExpired, if set, is called the moment the lease runs out and the KV is
	// released, while the stalled send is still being waited for.
	LeaseExpired func()
}

// Meta is what the header says beyond what the export knows.
type Meta struct {
	RequestID    string
	WorkerID     string // the sender's
	PromptTokens int
	Layout       engine.Layout
	// SkipBlocks is how many leading blocks the receiver said it holds.
	SkipBlocks int
}

// Sent is what a completed send moved.
type Sent struct {
	Blocks, Bytes int
	Skipped       int
	// Transfer is the time from the first chunk to the last.
	Transfer time.Duration
}

// Outcomes of a failed send, as a sender's metrics name them.
const (
	OutcomeReadError    = "read_error"    // a block could not be read out of the export
	OutcomeSendError    = "send_error"    // the transport refused a message
	OutcomeLeaseExpired = "lease_expired" // the receiver stalled past the lease
)

// SendError is a failed send. Err is what the sender's caller should return: a
// Connect error for a read failure or an expired lease, the transport's own error
// for a failed send.
type SendError struct {
	Outcome string
	Err     error
}

func (e *SendError) Error() string { return e.Outcome + ": " + e.Err.Error() }
func (e *SendError) Unwrap() error { return e.Err }

// Send streams exp: the header, chunks of whole blocks from the first the
// receiver lacks, and the trailer, each through send. The receiver needs the
// trailer to use the KV: only once it is sent is the handoff done. A stalled
// receiver must not pin KV forever: when the lease runs out the export is released
// at once. The send itself cannot be abandoned (a server handler may not return
// while a Send is in progress), so it is waited for: it ends when the receiver
// reads or its connection goes.
func (s Sender) Send(exp engine.Export, m Meta, send func(*prefillv1.PrefillResponse) error) (Sent, error) {
	n := exp.NumBlocks()
	skip := m.SkipBlocks
	if skip >= n {
		// The receiver holds every block but must still import at least the last one,
		// whose tail it is missing.
		skip = n - 1
	}
	leaseTimer := time.NewTimer(s.Lease)
	defer leaseTimer.Stop()
	expired := false
	leaseErr := func() error {
		return &SendError{Outcome: OutcomeLeaseExpired, Err: connect.NewError(connect.CodeDeadlineExceeded,
			fmt.Errorf("receiver stalled past the %s lease", s.Lease))}
	}
	leased := func(r *prefillv1.PrefillResponse) error {
		if expired {
			return leaseErr()
		}
		errc := make(chan error, 1)
		go func() { errc <- send(r) }()
		select {
		case err := <-errc:
			if err != nil {
				return &SendError{Outcome: OutcomeSendError, Err: err}
			}
			return nil
		case <-leaseTimer.C:
			expired = true
			exp.Release()
			if s.LeaseExpired != nil {
				s.LeaseExpired()
			}
			<-errc
			return leaseErr()
		}
	}
	layout := m.Layout
	err := leased(&prefillv1.PrefillResponse{Msg: &prefillv1.PrefillResponse_Header{Header: &prefillv1.Header{
		RequestId: m.RequestID, FirstToken: exp.FirstToken(), PromptTokens: uint32(m.PromptTokens),
		BlockSize: uint32(layout.BlockSize), Layout: LayoutProto(layout), NumBlocks: uint32(n),
		SkippedBlocks: uint32(skip), PrefillCachedBlocks: uint32(exp.CachedBlocks()), WorkerId: m.WorkerID,
		FirstTokenLogprobs: LogprobsProto(exp.FirstLogprobs()),
	}}})
	if err != nil {
		return Sent{}, err
	}
	per := max(1, s.ChunkBytes/max(1, layout.BlockBytes))
	start := time.Now()
	sent := Sent{Skipped: skip}
	buf := make([]byte, 0, per*layout.BlockBytes)
	for first := skip; first < n; first += per {
		count := min(per, n-first)
		buf = buf[:0]
		for i := first; i < first+count; i++ {
			if buf, err = exp.AppendBlock(buf, i); err != nil {
				return Sent{}, &SendError{Outcome: OutcomeReadError, Err: connect.NewError(connect.CodeInternal, fmt.Errorf("read block %d: %w", i, err))}
			}
		}
		chunk := &prefillv1.Chunk{FirstBlock: uint32(first), BlockCount: uint32(count), Data: buf, Crc32C: checksum(buf)}
		if err := leased(&prefillv1.PrefillResponse{Msg: &prefillv1.PrefillResponse_Chunk{Chunk: chunk}}); err != nil {
			return Sent{}, err
		}
		sent.Blocks += count
		sent.Bytes += len(buf)
	}
	sent.Transfer = time.Since(start)
	err = leased(&prefillv1.PrefillResponse{Msg: &prefillv1.PrefillResponse_Trailer{Trailer: &prefillv1.Trailer{
		BlocksSent: uint32(sent.Blocks), BytesSent: uint64(sent.Bytes), PrefillTime: durationpb.New(exp.PrefillTime()),
		QueueTime: durationpb.New(exp.QueueTime()), TransferTime: durationpb.New(sent.Transfer),
	}}})
	if err != nil {
		return Sent{}, err
	}
	return sent, nil
}
