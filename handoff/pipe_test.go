package handoff

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/tandem-serve/tandem/engine"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
)

// pipe is a prefill worker in process: a Client whose Prefill runs the prompt on
// eng and sends it with the real Sender. Messages cross as bytes, marshalled by the
// proto library and read back by GRPCClient's codec in 16 KiB pieces (as HTTP/2
// frames bring them), through a channel that holds four of them (as the KV port's
// stream window holds four 1 MiB chunks): both halves of a handoff with no network
// between them.
type pipe struct {
	eng        engine.Engine
	chunkBytes int
	worker     string
	// edit, if set, changes the i-th message before it is marshalled.
	edit func(i int, r *prefillv1.PrefillResponse)
	wg   sync.WaitGroup
}

func (p *pipe) Prefill(ctx context.Context, req *prefillv1.PrefillRequest) (Stream, error) {
	msgs := make(chan []byte, 4)
	s := &pipeStream{ctx: ctx, msgs: msgs}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		s.err = p.send(ctx, req, msgs)
		close(msgs) // after s.err is set: Recv reads it once msgs is closed
	}()
	return s, nil
}

// wait waits for every send to end.
func (p *pipe) wait() { p.wg.Wait() }

func (p *pipe) send(ctx context.Context, req *prefillv1.PrefillRequest, msgs chan<- []byte) error {
	exp, err := p.eng.Prefill(ctx, EngineRequest(req))
	if err != nil {
		return err
	}
	defer exp.Release()
	s := Sender{ChunkBytes: p.chunkBytes, Lease: req.GetLease().AsDuration()}
	sent := 0
	_, err = s.Send(exp, Meta{
		RequestID: req.GetRequestId(), WorkerID: p.worker, PromptTokens: len(req.GetPromptTokenIds()),
		Layout: p.eng.Info().Layout, SkipBlocks: int(req.GetSkipBlocks()),
	}, func(r *prefillv1.PrefillResponse) error {
		if p.edit != nil {
			p.edit(sent, r)
		}
		sent++
		b, err := proto.Marshal(r)
		if err != nil {
			return err
		}
		select {
		case msgs <- b:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	return err
}

type pipeStream struct {
	ctx   context.Context
	msgs  <-chan []byte
	err   error // the send's, read once msgs is closed
	codec chunkCodec
}

func (s *pipeStream) Recv() (*prefillv1.PrefillResponse, error) {
	select {
	case b, ok := <-s.msgs:
		if !ok {
			if s.err != nil && !errors.Is(s.err, context.Canceled) {
				return nil, s.err
			}
			return nil, io.EOF
		}
		var frames mem.BufferSlice
		for len(b) > 0 {
			n := min(len(b), 16<<10)
			frames, b = append(frames, mem.SliceBuffer(b[:n])), b[n:]
		}
		m := &prefillv1.PrefillResponse{}
		if err := s.codec.Unmarshal(frames, m); err != nil {
			return nil, err
		}
		return m, nil
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}
