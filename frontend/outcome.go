package frontend

import "time"

// Outcome is what one generation request did: where it ran, how its prompt was
// prefilled and why, what the router expected to find cached there, and how fast
// tokens came. Observers (the console) get one for each request that reached a
// decode worker, when it ends.
type Outcome struct {
	RequestID string
	// Endpoint is the API the request came through, e.g. "chat_completions".
	Endpoint   string
	Start, End time.Time

	// Path is "local", "remote", "fallback" or "unknown"; Reason is its label
	// (e.g. "below_threshold"), Detail the sentence for humans.
	Path, Reason, Detail string
	// Policy is the decode worker's prefill policy that decided.
	Policy        string
	DecodeWorker  string
	PrefillWorker string
	RouteReason   string

	PromptTokens int
	// EffectiveTokens is what the decision weighed: the prompt minus the prefix
	// the decode worker held.
	EffectiveTokens int
	// DecodeCachedTokens is that prefix, as the decode worker found it;
	// RouteCachedBlocks is what the router's index said it held when it chose
	// it. The two agree when the router's view of the caches is right.
	DecodeCachedTokens int
	RouteCachedBlocks  int
	// CachedTokens is usage's cached_tokens: prompt tokens whose KV came from a
	// prefix cache, the decode worker's or the prefill worker's.
	CachedTokens     int
	CompletionTokens int

	// TTFT is the time from the request's arrival to its first token; 0 when no
	// token came. ITL is the mean gap between its tokens; 0 with fewer than two.
	TTFT, ITL time.Duration
	// Finish is "stop" or "length"; empty when the request failed or its client
	// went away.
	Finish string
}

// OnOutcome makes fn hear every request's Outcome as it ends, from the request's
// goroutine: fn must return quickly. Call it before serving.
func (f *Frontend) OnOutcome(fn func(Outcome)) { f.outcomes.Store(&fn) }

// outcome is g's Outcome now.
func (g *generation) outcome(endpoint string, end time.Time) Outcome {
	u := g.usage()
	o := Outcome{
		RequestID: g.requestID, Endpoint: endpoint, Start: g.started, End: end,
		Path: g.info.Path, Reason: g.info.Reason, Detail: g.info.Detail, Policy: g.decision.GetPolicy(),
		DecodeWorker: g.info.DecodeWorker, PrefillWorker: g.info.PrefillWorker, RouteReason: g.info.RouteReason,
		PromptTokens: u.prompt, EffectiveTokens: int(g.decision.GetEffectiveTokens()),
		DecodeCachedTokens: int(g.decision.GetCachedTokens()), RouteCachedBlocks: g.routeCachedBlocks,
		CachedTokens: u.cached, CompletionTokens: u.completion, Finish: g.finish,
	}
	if !g.firstToken.IsZero() {
		o.TTFT = g.firstToken.Sub(g.started)
		if g.generated > 1 {
			o.ITL = g.lastToken.Sub(g.firstToken) / time.Duration(g.generated-1)
		}
	}
	return o
}
