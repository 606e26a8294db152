package decode

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/engine"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
)

func validate(m *decodev1.GenerateRequest, info engine.Info) error {
	n := len(m.GetPromptTokenIds())
	switch {
	case n == 0:
		return connect.NewError(connect.CodeInvalidArgument, errors.New("prompt_token_ids: empty"))
	case n >= info.ContextLength:
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("prompt_token_ids: %d tokens, the model's context is %d", n, info.ContextLength))
	}
	for i, t := range m.GetPromptTokenIds() {
		if int(t) >= info.VocabSize {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("prompt_token_ids[%d]: token %d is outside the vocabulary of %d", i, t,
				info.VocabSize))
		}
	}
	if s := m.GetSampling(); s.GetTemperature() < 0 || s.GetTopP() < 0 || s.GetTopP() > 1 {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("sampling: temperature %g must be >= 0 and top_p %g in [0,1]",
			s.GetTemperature(), s.GetTopP()))
	}
	if n := m.GetSampling().GetTopLogprobs(); n > engine.MaxTopLogprobs {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("sampling.top_logprobs: %d, at most %d", n, engine.MaxTopLogprobs))
	}
	return nil
}

func finishProto(f engine.FinishReason) decodev1.FinishReason {
	switch f {
	case engine.FinishStop:
		return decodev1.FinishReason_FINISH_REASON_STOP
	case engine.FinishLength:
		return decodev1.FinishReason_FINISH_REASON_LENGTH
	case engine.FinishCancelled:
		return decodev1.FinishReason_FINISH_REASON_CANCELLED
	}
	return decodev1.FinishReason_FINISH_REASON_UNSPECIFIED
}

type metrics struct {
	decisions      *prometheus.CounterVec
	fallbacks      *prometheus.CounterVec
	remoteFailures *prometheus.CounterVec
	completed      *prometheus.CounterVec
	ttft           *prometheus.HistogramVec
	itl            prometheus.Histogram
	handoffBytes   prometheus.Histogram
	handoffSeconds prometheus.Histogram
	queueWait      prometheus.Histogram
	rejected       *prometheus.CounterVec
	pendingTokens  *prometheus.GaugeVec
	tpotSlack      prometheus.Gauge
	tbtProjected   prometheus.Gauge
	stepProjected  *prometheus.GaugeVec
	engineText     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	lat := prometheus.ExponentialBuckets(0.001, 2, 16)
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_prefill_decisions_total",
			Help: "Prefill decisions by the path taken (local, remote, fallback; error when enforce-disagg refused a fallback, or when the " +
				"remote KV found no free blocks here: reason import_no_blocks) and reason.",
		}, []string{"path", "reason"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_decode_fallbacks_total", Help: "Requests whose remote prefill was abandoned for local prefill, by reason.",
		}, []string{"reason"}),
		remoteFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_decode_remote_prefill_failures_total", Help: "Failed remote prefill attempts (a request may make two), by reason.",
		}, []string{"reason"}),
		completed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_decode_requests_total", Help: "Requests finished on this decode worker, by finish reason.",
		}, []string{"finish"}),
		engineText: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_decode_engine_text_requests_total",
			Help: "Requests answered with the engine's own text beside guessed token ids (an engine server in text mode).",
		}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tandem_decode_time_to_first_token_seconds", Help: "Time from Generate to the first token, by prefill path.", Buckets: lat,
		}, []string{"path"}),
		itl: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tandem_decode_inter_token_latency_seconds", Help: "Gap between consecutive tokens of a request.", Buckets: lat,
		}),
		handoffBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tandem_handoff_bytes", Help: "KV bytes imported per remote prefill.",
			Buckets: prometheus.ExponentialBuckets(1024, 4, 12),
		}),
		handoffSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tandem_handoff_seconds", Help: "Time from the first KV chunk to the trailer of a remote prefill.", Buckets: lat,
		}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tandem_handoff_queue_wait_seconds", Help: "Time remote prefills waited in the prefill worker's queue.", Buckets: lat,
		}),
	}
	m.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tandem_decode_rejected_total",
		Help: "Requests refused at admission (ResourceExhausted), by reason: max_running (the request limit), " +
			"kv_usage (the KV pool fuller than its limit), waiting_tokens (too many prompt tokens waiting for prefill), " +
			"kv_blocks (no free KV blocks for a remote prefill's KV: within the import's wait after the prefill, or, with the pre-check, " +
			"before it), ttft_unmeetable (the projected TTFT past the shed factor times the objective on every path).",
	}, []string{"reason"})
	for _, r := range []string{RejectMaxRunning, RejectKVUsage, RejectWaitingTokens, RejectKVBlocks, RejectTTFTUnmeetable} {
		m.rejected.WithLabelValues(r) // every reason a series from the start, at 0
	}
	m.pendingTokens = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tandem_decode_pending_remote_prefill_tokens",
		Help: "Prompt tokens this worker has sent to each prefill worker and not yet seen prefilled; counted in the prefill queue the " +
			"decision looks at. A worker's series goes away when nothing is pending there (absent means 0).",
	}, []string{"prefill_worker"})
	m.tpotSlack = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tandem_decode_tpot_slack_seconds",
		Help: "slo policy: the least TPOT slack among the sequences decoding here that can still meet their SLOs, at the last decision " +
			"that saw one (seconds of stall the tightest can take).",
	})
	// A gauge, as the TPOT slack: what an operator holds against tbt_slo_ms
	// is how near the worst stream is to it now (slo goes remote past 80 % of
	// it), one series to alert on; a histogram of every decision's projection
	// would mostly count idle moments and hide the worst behind a bucket.
	m.tbtProjected = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tandem_decode_tbt_projected_seconds",
		Help: "slo policy with a TBT objective: the highest TBT projected, were the request to be prefilled here, among the sequences " +
			"decoding here that can still meet their SLOs, at the last decision that saw one (seconds; compare with tbt_slo_ms).",
	})
	m.stepProjected = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tandem_decode_step_projected_seconds",
		Help: "slo policy on an engine that reports its steps: the engine step the last decision projected from the fit to them, " +
			"plain (the batch decoding alone) and stretched (with the prompt's fullest chunk beside it), seconds.",
	}, []string{"step"})
	reg.MustRegister(m.rejected, m.pendingTokens, m.tpotSlack, m.tbtProjected, m.stepProjected)
	reg.MustRegister(m.decisions, m.fallbacks, m.remoteFailures, m.completed, m.engineText, m.ttft, m.itl, m.handoffBytes, m.handoffSeconds, m.queueWait)
	return m
}
