package decode

import (
	"context"
	"time"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/handoff"
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
func (s *Service) remotePrefill(ctx context.Context, client handoff.Client, workerID string, req engine.Request, skip int,
	deadline time.Duration) (engine.Stream, *handoff.Result, error) {
	f := handoff.Fetch{Worker: workerID, Skip: skip, Deadline: deadline, Headed: s.pending.add(workerID, len(req.Prompt))}
	return f.Run(ctx, client, s.eng, req)
}
