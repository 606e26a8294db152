// Package bench is tandem's serving benchmark: workloads, arrival processes, a
// streaming client for any OpenAI-compatible server, and the statistics
// `vllm bench serve` reports (TTFT, TPOT, ITL, E2E, throughput, goodput), per run and
// per request class. It reads no flags; cmd/tandem's bench command wires it up.
//
// The metrics follow vLLM's definitions exactly, with one deliberate difference
// spelled out: TTFT ends at the first chunk that carries content (vLLM stops the
// clock at the first chunk with a choices array, which for chat is the role-only
// chunk a server may send before prefill finishes), and ITL gaps are between
// content chunks. TPOT is (E2E - TTFT) / (output tokens - 1), per request, the
// figure AIPerf calls "ITL".
package bench

import (
	"slices"
	"time"
)

// Message is one turn of a chat.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Request is one generation a workload asks for.
type Request struct {
	// Class names the kind of request ("64/32", "turn-2", ...); statistics are
	// reported per class as well as for the whole run.
	Class string
	// Prompt is the text for /v1/completions; for chat it becomes one user message
	// when Messages is empty.
	Prompt string
	// Messages is the conversation for /v1/chat/completions; for completions it is
	// flattened to text.
	Messages []Message
	// PromptIDs, when set, is the prompt as token ids of the served model, sent as
	// /v1/completions' prompt (a list of ids) instead of Prompt.
	PromptIDs []uint32
	// MaxTokens is the output budget. Unless IgnoreEOS is set a request may end
	// early, and the tokens that arrive are what is counted.
	MaxTokens int
	// IgnoreEOS asks for exactly MaxTokens output tokens (vLLM's ignore_eos,
	// which tandem's frontend implements too); a request that gets fewer is
	// counted as a shortfall.
	IgnoreEOS bool
	// WantTokens, when set, is the output length the workload expects (a
	// trace's output_length): a request that gets fewer is a shortfall, whether
	// or not IgnoreEOS was sent. 0 means MaxTokens when IgnoreEOS is set.
	WantTokens int
	// PromptTokens is the prompt's length in tokens as built (cl100k for text,
	// the served model's for PromptIDs), or 0 when the workload did not count it
	// (the server's usage is recorded separately).
	PromptTokens int
	// At is when to send the request, from the start of the run, for a workload
	// that schedules its own arrivals (a trace).
	At time.Duration

	// conv is the multi-turn conversation this request continues, if any.
	conv *conversation
}

// Result is what one request measured. Times are from the moment the request was
// sent.
type Result struct {
	Class string
	// Start is when the request was sent, from the start of the run.
	Start time.Duration
	// TTFT is the time to the first chunk that carried content.
	TTFT time.Duration
	// ITL holds every gap between consecutive content chunks.
	ITL []time.Duration
	// E2E is the time to the end of the stream.
	E2E time.Duration
	// OutputTokens comes from the server's usage when it sent one, else from
	// tokenizing what arrived (UsageReported says which).
	OutputTokens  int
	PromptTokens  int
	UsageReported bool
	// CachedTokens is the usage's prompt_tokens_details.cached_tokens: prompt
	// tokens the server had in its prefix cache; CachedReported says the usage
	// had prompt_tokens_details at all.
	CachedTokens   int
	CachedReported bool
	// WantTokens is the output length that was enforced with ignore_eos (0: none
	// was); a completed request with fewer OutputTokens fell short.
	WantTokens int
	// Chunks counts the content chunks received.
	Chunks int
	// PrefillPath is the x-tandem-prefill-path header (or the body's extension
	// field); "" when the server did not say.
	PrefillPath string
	// Err is why the request failed; "" for success.
	Err string
	// Aborted marks a request cut short because the run was stopped; it is neither
	// a success nor a failure.
	Aborted bool
	// Warmup marks a request sent during the warm-up period; it is not counted.
	Warmup bool

	// text is the generated text, for workloads that continue a conversation.
	text string
}

// OK reports whether the request succeeded.
func (r *Result) OK() bool { return r.Err == "" && !r.Aborted }

// Short reports whether a completed request got fewer output tokens than it
// enforced.
func (r *Result) Short() bool { return r.OK() && r.WantTokens > 0 && r.OutputTokens < r.WantTokens }

// TPOT is (E2E - TTFT) / (output tokens - 1), vLLM's time per output token after
// the first. ok is false for a request with fewer than two output tokens, which has
// no TPOT (vLLM leaves it out of the TPOT statistics and counts it as 0 for
// goodput).
func (r *Result) TPOT() (tpot time.Duration, ok bool) {
	if r.OutputTokens < 2 {
		return 0, false
	}
	return (r.E2E - r.TTFT) / time.Duration(r.OutputTokens-1), true
}

// TBT is the Mooncake paper's time between tokens: the mean of the longest tenth
// (at least one) of the request's gaps between chunks; 0 with no gap.
func (r *Result) TBT() time.Duration {
	if len(r.ITL) == 0 {
		return 0
	}
	gaps := slices.Clone(r.ITL)
	slices.Sort(gaps)
	top := gaps[len(gaps)-(len(gaps)+9)/10:]
	var sum time.Duration
	for _, g := range top {
		sum += g
	}
	return sum / time.Duration(len(top))
}
