package handoff

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tandem-serve/tandem/engine"
)

// Engine is what the receiving side needs of its engine.Engine.
type Engine interface {
	Info() engine.Info
	Import(ctx context.Context, req engine.Request, spec engine.ImportSpec) (engine.Importer, error)
}

// Fetch is the receiving half of one handoff, end to end.
type Fetch struct {
	// Worker names the prefill worker asked, in errors.
	Worker string
	// Skip is how many of the prompt's leading blocks the receiving engine holds:
	// only the rest is sent.
	Skip int
	// Deadline bounds the handoff, and is the lease the sender is asked to keep
	// the KV for.
	Deadline time.Duration
	// Headed, if set, is called once the header has arrived or the handoff failed
	// before it: either way the prefill on the worker is over.
	Headed func()
}

// Result is what a successful fetch moved and measured.
type Result struct {
	Stats
	Skipped, PrefillCached int // from the header
	// Total is the whole fetch, as the receiver saw it.
	Total time.Duration
}

// Run asks client for req's KV, checks the header against eng, imports the blocks
// and commits: the stream then decodes from the header's first token. A failure is
// an *Error, or ctx's own error when the caller went away; the import is aborted,
// which frees its blocks, and the stream's context is cancelled, which frees the
// sender's. The deadline bounds only the handoff: the returned stream lives as long
// as ctx.
//
// An engine that takes KV by reference (engine.RefImporter) is handed it so: the
// header carries the prefill engine's transfer parameters, which start the
// engine's decode leg, and the trailer confirms the prefill engine's side.
func (f Fetch) Run(ctx context.Context, client Client, eng Engine, req engine.Request) (engine.Stream, *Result, error) {
	if re, ok := eng.(RefEngine); ok {
		return f.runRef(ctx, client, re, req)
	}
	start := time.Now()
	hctx, cancel := context.WithTimeout(ctx, f.Deadline)
	defer cancel()
	headed := f.headedOnce()
	defer headed()
	info := eng.Info()
	stream, err := client.Prefill(hctx, request(req, f.Skip, f.Deadline))
	if err != nil {
		return nil, nil, classify(hctx, err, true)
	}
	h, err := ReadHeader(hctx, stream, Want{
		Layout: info.Layout, VocabSize: info.VocabSize, Worker: f.Worker,
		NumBlocks: (len(req.Prompt) + info.Layout.BlockSize - 1) / info.Layout.BlockSize, MaxSkip: f.Skip,
	})
	headed()
	if err != nil {
		return nil, nil, err
	}
	// Half of what is left: the other half is for receiving the KV, within the
	// same deadline as the sender's lease.
	imp, err := eng.Import(hctx, req, h.ImportSpec(time.Until(start.Add(f.Deadline))/2))
	if err != nil && hctx.Err() != nil {
		// The import's wait was cut short, not found wanting: the caller gone
		// (its error as it is), or the handoff's deadline (a timeout, and a
		// fallback: a local prefill may yet find blocks), never a refusal for
		// lack of blocks, whatever the engine called it.
		return nil, nil, classify(hctx, fmt.Errorf("import: %w", err), false)
	}
	if errors.Is(err, engine.ErrNoBlocks) {
		// The receiver's pool is full: another prefill worker would not help, nor
		// would a local prefill on the same pool; the decode worker refuses the
		// request for another decode worker to take (decode.noBlocks).
		return nil, nil, failed(ReasonImportNoBlocks, false, "import: %v", err)
	}
	if err != nil {
		return nil, nil, failed(ReasonImportFailed, true, "import: %v", err)
	}
	committed := false
	defer func() {
		if !committed {
			imp.Abort()
		}
	}()
	st, err := Receive(hctx, stream, h, imp)
	if err != nil {
		return nil, nil, err
	}
	out, err := imp.Commit(ctx)
	if err != nil {
		return nil, nil, failed(ReasonImportFailed, false, "commit: %v", err)
	}
	committed = true
	return out, &Result{Stats: st, Skipped: h.Skipped, PrefillCached: h.PrefillCached, Total: time.Since(start)}, nil
}

// headedOnce is f.Headed, callable any number of times.
func (f Fetch) headedOnce() func() {
	return sync.OnceFunc(func() {
		if f.Headed != nil {
			f.Headed()
		}
	})
}
