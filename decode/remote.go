package decode

import (
	"context"
	"time"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/handoff"
	"github.com/tandem-serve/tandem/internal/spans"
)

// Prefillers resolves prefill worker ids through this worker's own discovery: a
// request names workers, never addresses.
type Prefillers interface {
	Client(workerID string) (handoff.Client, bool)
	// IDs lists the known prefill workers, for when the router suggested none.
	IDs() []string
	// Failed says that a worker failed a prefill before any KV arrived, so that
	// discovery asks again whether it serves rather than offer it to the next
	// request.
	Failed(workerID string)
}

// remotePrefill runs the prompt on one prefill worker and imports its KV
// (handoff.Fetch), counting the prompt as pending there until the header says the
// prefill is done. The whole prompt: the prefill worker queues and counts all of
// it, whatever it then skips sending.
//
// Each try is a rung of the fallback ladder, and a span of its own: the prefill
// worker, the KV it sent (bytes, blocks, times) or why it failed.
func (s *Service) remotePrefill(ctx context.Context, client handoff.Client, workerID string, rung int, req engine.Request, skip int,
	deadline time.Duration) (engine.Stream, *handoff.Result, error) {
	ctx, span := spans.Start(ctx, "decode.remote_prefill")
	defer span.End()
	f := handoff.Fetch{Worker: workerID, Skip: skip, Deadline: deadline, Headed: s.pending.add(workerID, len(req.Prompt))}
	stream, ho, err := f.Run(ctx, client, s.eng, req)
	if span.IsRecording() {
		traceRung(span, workerID, rung, skip, ho, err)
	}
	return stream, ho, err
}
