package frontend

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Latency buckets as vLLM uses for time to first token, so dashboards carry over.
var latencyBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
	0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}

type metrics struct {
	// requests counts finished requests by endpoint and HTTP status; Connect calls
	// are counted under the HTTP status their code maps to, so one label means
	// one thing.
	requests         *prometheus.CounterVec
	ttft             *prometheus.HistogramVec
	itl              *prometheus.HistogramVec
	e2e              *prometheus.HistogramVec
	promptTokens     prometheus.Counter
	generationTokens prometheus.Counter
	prefillPath      *prometheus.CounterVec
	rejected         *prometheus.CounterVec
	queued           prometheus.Gauge
	chatPrompts      *prometheus.CounterVec
	bodyTimeouts     prometheus.Counter
	// choiceRequests counts requests asking for several choices (n > 1 or a batch
	// of prompts), and choices the generations they fanned out to.
	choiceRequests *prometheus.CounterVec
	choices        *prometheus.CounterVec
	// toolReplies counts replies read for tool calls by parser and result;
	// toolCalls the calls they held.
	toolReplies *prometheus.CounterVec
	toolCalls   *prometheus.CounterVec
	// constraints counts requests with a response_format constraint, accepted or
	// refused for a schema outside the supported subset.
	constraints *prometheus.CounterVec
}

// newMetrics registers with reg; a nil reg keeps the metrics unregistered, which
// tests that build many Frontends want.
func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_frontend_requests_total",
			Help: "Requests finished, by endpoint and HTTP status code.",
		}, []string{"endpoint", "code"}),
		ttft: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tandem_frontend_time_to_first_token_seconds",
			Help:    "Time from receiving a request to the first generated token.",
			Buckets: latencyBuckets,
		}, []string{"endpoint"}),
		itl: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tandem_frontend_inter_token_latency_seconds",
			Help:    "Mean time between a request's tokens after the first, one observation per request of at least two tokens.",
			Buckets: latencyBuckets,
		}, []string{"endpoint"}),
		e2e: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tandem_frontend_e2e_request_latency_seconds",
			Help:    "Time from receiving a generation request to its last byte.",
			Buckets: latencyBuckets,
		}, []string{"endpoint"}),
		promptTokens: f.NewCounter(prometheus.CounterOpts{
			Name: "tandem_frontend_prompt_tokens_total",
			Help: "Prompt tokens, after the chat template, of requests that reached the backend.",
		}),
		generationTokens: f.NewCounter(prometheus.CounterOpts{
			Name: "tandem_frontend_generation_tokens_total",
			Help: "Tokens generated.",
		}),
		prefillPath: f.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_frontend_prefill_path_total",
			Help: "Requests by how their prompt was prefilled: local, remote, fallback (or unknown if the backend did not say).",
		}, []string{"path"}),
		rejected: f.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_frontend_rejected_total",
			Help: "Requests refused by admission control: queue_full (429) or queue_timeout (503).",
		}, []string{"reason"}),
		queued: f.NewGauge(prometheus.GaugeOpts{
			Name: "tandem_frontend_queued_requests", Help: "Requests waiting for an admission slot.",
		}),
		chatPrompts: f.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_frontend_chat_prompts_total",
			Help: "Chat prompts by how message contents were kept from forming special tokens: " +
				"split (contents encoded as plain text), whole (template rewrites contents, none holds special-token text) or refused (400).",
		}, []string{"how"}),
		bodyTimeouts: f.NewCounter(prometheus.CounterOpts{
			Name: "tandem_frontend_body_timeouts_total",
			Help: "Requests whose body did not arrive within --body-read-timeout plus its length at --body-min-rate (408, connection closed).",
		}),
		choiceRequests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_frontend_multi_choice_requests_total",
			Help: "Requests asking for several choices (n > 1 or a batch of prompts), by endpoint.",
		}, []string{"endpoint"}),
		choices: f.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_frontend_choices_total",
			Help: "Choices (one generation each) requested by requests asking for several, by endpoint.",
		}, []string{"endpoint"}),
		toolReplies: f.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_frontend_tool_call_replies_total",
			Help: "Chat replies read for tool calls, by parser and result: calls (at least one call), content (text only) " +
				"or malformed (a call begun and not finished in the parser's format, returned as content).",
		}, []string{"parser", "result", "enforced"}),
		toolCalls: f.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_tool_calls_total",
			Help: "Tool calls parsed from chat replies, by parser and whether tool_choice required a call (enforced).",
		}, []string{"parser", "enforced"}),
		constraints: f.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_frontend_constrained_requests_total",
			Help: "Generations with a response_format constraint: outcome accepted, or refused (a schema outside the supported subset).",
		}, []string{"outcome"}),
	}
}
