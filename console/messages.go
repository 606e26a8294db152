package console

// The messages of the events endpoint (GET /console/events), one type per SSE
// event name. docs/CONSOLE.md documents them for other tools; times are Unix
// milliseconds, latencies milliseconds.

// Hello is the first event of every connection.
type Hello struct {
	Version string `json:"version"`
	// Model is the model served; "" until a worker has published it (each tick
	// says it too).
	Model string `json:"model"`
	// PolicyWritable: POST /console/policy can change the runtime policy (the
	// deployment uses Consul).
	PolicyWritable bool `json:"policy_writable"`
	// WindowSeconds is the span of the latency percentiles in each tick;
	// HistorySeconds the span of the history event.
	WindowSeconds  int `json:"window_seconds"`
	HistorySeconds int `json:"history_seconds"`
}

// Fleet is the router's view of its workers and its parameters: sent on connect
// and whenever the router reports a change. Each one replaces the last.
type Fleet struct {
	Time int64 `json:"time"`
	// Connected is false while the frontend cannot reach the router's fleet
	// stream; Error says why, and the workers are the last ones known.
	Connected   bool   `json:"connected"`
	Error       string `json:"error,omitempty"`
	BlockSize   int    `json:"block_size"`
	IndexBlocks uint64 `json:"index_blocks"`
	// Router is nil until the router has answered once.
	Router  *RouterPolicy `json:"router"`
	Workers []Worker      `json:"workers"`
	// Planner is the planner's plan the router applies; nil when there is none.
	Planner *Planner `json:"planner,omitempty"`
}

// Planner is the plan a planner decided (docs/DESIGN.md, "The planner"), as
// the router applies it: its shape, why, the operator's pin and the last
// switches.
type Planner struct {
	// Source is "planner" when the router runs the planner, "consul" when it
	// follows the plan a planner published in Consul KV (tandem/planner/plan).
	Source string `json:"source"`
	// Decided is when the planner decided it.
	Decided        int64  `json:"decided"`
	Reason         string `json:"reason"`
	PrefillWorkers uint32 `json:"prefill_workers"`
	DecodeWorkers  uint32 `json:"decode_workers"`
	// ISLThreshold is the prompt length from which prompts are prefilled
	// remotely; 0 when no worker prefills for others.
	ISLThreshold uint32 `json:"isl_threshold"`
	// Roles are the lenders' roles by worker id: "prefill" or "decode".
	Roles  map[string]string `json:"roles"`
	Pinned bool              `json:"pinned"`
	// Pin is the operator's pin (tandem/config/planner) that holds the plan.
	Pin *PlannerPin `json:"pin,omitempty"`
	// ArrivalRate is the averaged rate it saw, requests/s; ProjectedCapacity
	// and BestCapacity the capacity its model projects for the plan's shape and
	// for the best shape it found.
	ArrivalRate       float64 `json:"arrival_rate"`
	ProjectedCapacity float64 `json:"projected_capacity"`
	BestCapacity      float64 `json:"best_capacity"`
	// Switches are the last plans that moved a lender, newest first.
	Switches []PlannerSwitch `json:"switches"`
}

// PlannerPin is a pin with the fields of tandem/config/planner.
type PlannerPin struct {
	Current      bool   `json:"current,omitempty"`
	Prefill      uint32 `json:"prefill"`
	ISLThreshold uint32 `json:"isl_threshold"`
}

// PlannerSwitch is one plan that moved a lender.
type PlannerSwitch struct {
	Time         int64             `json:"time"`
	Reason       string            `json:"reason"`
	Roles        map[string]string `json:"roles"`
	ISLThreshold uint32            `json:"isl_threshold"`
	Pinned       bool              `json:"pinned"`
}

// Worker is one worker of the fleet.
type Worker struct {
	ID      string `json:"id"`
	Mode    string `json:"mode"` // "aggregated", "decode" or "prefill"
	Address string `json:"address"`
	// Draining: tandem drain took it out of rotation; it gets nothing new.
	Draining bool `json:"draining"`
	// Reported: a load report has arrived; the load fields are zero before.
	Reported      bool   `json:"reported"`
	Running       uint32 `json:"running"`
	Waiting       uint32 `json:"waiting"`
	WaitingTokens uint64 `json:"waiting_tokens"`
	// The KV cache in blocks: used (held by requests), of total; usage is
	// used/total.
	KVTotalBlocks uint32  `json:"kv_total_blocks"`
	KVUsedBlocks  uint32  `json:"kv_used_blocks"`
	KVUsage       float64 `json:"kv_usage"`
	// CachedBlocks is its prefix cache as the router's index holds it; Synced is
	// false while the index waits for a fresh snapshot of it.
	CachedBlocks uint32 `json:"cached_blocks"`
	Synced       bool   `json:"synced"`
	// NoKVEvents: its engine reports no KV events (some GPU engine servers), so
	// its cache is unknown and the router scores it on load alone.
	NoKVEvents bool `json:"no_kv_events"`
	// Lending: a lender the router keeps out of the decode candidates while it
	// prefills for decode workers (lenders_prefill_first).
	Lending bool `json:"lending"`
	// Role is a lender's role as the planner set it: "prefill", "decode", or
	// "" (both).
	Role string `json:"role,omitempty"`
	// Routed counts the requests the router sent it since the router started.
	Routed uint64 `json:"routed"`
	// PrefillPolicy is a decode worker's; nil for prefill workers.
	PrefillPolicy *DecodePolicy `json:"prefill_policy,omitempty"`
}

// DecodePolicy is a decode worker's prefill policy, with the JSON names of
// tandem/config/decode (decode.Params), so that it can be edited and sent back.
type DecodePolicy struct {
	Policy                string  `json:"policy"`
	ShortPrefillThreshold uint32  `json:"short_prefill_threshold"`
	ITLWeight             float64 `json:"itl_weight"`
	EnforceDisagg         bool    `json:"enforce_disagg"`
	MaxPrefillQueueTokens uint64  `json:"max_prefill_queue_tokens"`
}

// RouterPolicy is the router's parameters, with the JSON names of
// tandem/config/router (router.Params), and the ISL threshold in force (which the
// adaptive threshold moves).
type RouterPolicy struct {
	PrefillWeight       float64 `json:"prefill_weight"`
	QueueWeight         float64 `json:"queue_weight"`
	Temperature         float64 `json:"temperature"`
	ISLGate             bool    `json:"isl_gate"`
	ISLThreshold        uint32  `json:"isl_threshold"`
	ISLAdaptive         bool    `json:"isl_adaptive"`
	ISLMin              uint32  `json:"isl_min"`
	ISLMax              uint32  `json:"isl_max"`
	ISLThresholdInForce uint32  `json:"isl_threshold_in_force"`
	LendersPrefillFirst bool    `json:"lenders_prefill_first"`
}

// Request is one finished request: where it ran, how its prompt was prefilled and
// why, and how fast it went.
type Request struct {
	Time      int64  `json:"time"` // when it ended
	ID        string `json:"id"`
	Endpoint  string `json:"endpoint"`
	Path      string `json:"path"` // "local", "remote", "fallback" or "unknown"
	Reason    string `json:"reason"`
	Detail    string `json:"detail,omitempty"`
	Policy    string `json:"policy,omitempty"`
	Decode    string `json:"decode_worker"`
	Prefill   string `json:"prefill_worker,omitempty"`
	RouteWhy  string `json:"route_reason,omitempty"`
	Prompt    int    `json:"prompt_tokens"`
	Effective int    `json:"effective_tokens"`
	// Cached is usage's cached_tokens. DecodeCached is the prefix the decode
	// worker found in its cache; RouteCached the prefix the router's index said it
	// held (0 while the block size is unknown).
	Cached       int     `json:"cached_tokens"`
	DecodeCached int     `json:"decode_cached_tokens"`
	RouteCached  int     `json:"route_cached_tokens"`
	Completion   int     `json:"completion_tokens"`
	TTFTMs       float64 `json:"ttft_ms"`
	ITLMs        float64 `json:"itl_ms"`
	DurationMs   float64 `json:"duration_ms"`
	// Finish is "stop" or "length"; empty when the request failed or its client
	// went away.
	Finish string `json:"finish"`
}

// Tick closes each second: what the requests that ended in it did, and the
// latency percentiles over the last WindowSeconds.
type Tick struct {
	Time  int64  `json:"time"`
	Model string `json:"model"`
	// Paths counts the second's requests by prefill path; Reasons by
	// "path/reason", e.g. "remote/above_threshold".
	Paths    Paths          `json:"paths"`
	Reasons  map[string]int `json:"reasons"`
	Failed   int            `json:"failed"`
	Tokens   int            `json:"tokens"` // completion tokens
	TTFT     Percentiles    `json:"ttft_ms"`
	ITL      Percentiles    `json:"itl_ms"`
	Cache    CacheCheck     `json:"cache"`
	Requests int            `json:"requests"`
	// ISLThreshold is the router's threshold in force while gating is on; 0 when
	// it is off.
	ISLThreshold uint32 `json:"isl_threshold"`
}

// Paths counts requests by prefill path.
type Paths struct {
	Local    int `json:"local"`
	Remote   int `json:"remote"`
	Fallback int `json:"fallback"`
	Unknown  int `json:"unknown"`
}

// Percentiles of a latency over the window; zero with no sample.
type Percentiles struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
}

// CacheCheck sums, over the window, the prompt prefix the router expected the
// chosen decode workers to hold and what they found: whether the router's cache
// hits are real.
type CacheCheck struct {
	Expected int `json:"expected_tokens"`
	Found    int `json:"found_tokens"`
}

// History is sent on connect, after the fleet: the last HistorySeconds of ticks
// and the latest requests, oldest first.
type History struct {
	Ticks    []Tick    `json:"ticks"`
	Requests []Request `json:"requests"`
}
