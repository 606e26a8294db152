package frontend

import (
	"context"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	frontendv1 "github.com/tandem-serve/tandem/proto/tandem/frontend/v1"
)

// controlsFromProto checks the request's sampling controls as the HTTP API's
// fields, so both APIs refuse the same values with the same field names.
func controlsFromProto(m *frontendv1.GenerateRequest, g *genRequest) error {
	f64 := func(v *float32) *float64 {
		if v == nil {
			return nil
		}
		x := float64(*v)
		return &x
	}
	s := &samplingFields{
		PresencePenalty: f64(m.PresencePenalty), FrequencyPenalty: f64(m.FrequencyPenalty),
		RepetitionPenalty: f64(m.RepetitionPenalty), MinP: f64(m.MinP), StopTokenIDs: m.GetStopTokenIds(),
	}
	if k := m.GetTopK(); k > 0 {
		topK := int64(k)
		s.TopK = &topK
	}
	if lb := m.GetLogitBias(); len(lb) > 0 {
		s.LogitBias = make(map[string]float64, len(lb))
		for id, v := range lb {
			s.LogitBias[strconv.FormatUint(uint64(id), 10)] = float64(v)
		}
	}
	return g.controls.parse(s)
}

// choicesOf is a Connect request's n, checked as the HTTP API checks it.
func (f *Frontend) choicesOf(m *frontendv1.GenerateRequest, g *genRequest) (int, error) {
	n := max(int(m.GetN()), 1)
	switch {
	case n > maxN:
		return 0, invalidField("n", "n=%d is out of range; it must be between 1 and %d", n, maxN)
	case n > 1 && g.tools.parses():
		return 0, invalidField("n", "n=%d with tools is not supported; ask for one choice, or set tool_choice to none", n)
	case n > 1 && f.cfg.MaxInFlight > 0 && n > f.cfg.MaxInFlight:
		return 0, invalidField("n", "%d choices asked for, but this server generates at most %d requests at once", n, f.cfg.MaxInFlight)
	}
	return n, nil
}

// generateChoices streams n answers to one request, each message carrying its
// answer's index: each answer's first message (request id, prefill), its text as
// it comes, interleaved with the others', and its last (finish reason, usage).
// The answers share the prompt's prefill as the HTTP API's choices do.
func (f *Frontend) generateChoices(ctx context.Context, rc *reqCtx, g *genRequest, n int,
	stream *connect.ServerStream[frontendv1.GenerateResponse]) error {
	f.metrics.choiceRequests.WithLabelValues(rc.endpoint).Inc()
	f.metrics.choices.WithLabelValues(rc.endpoint).Add(float64(n))
	rc.log.Info("several choices requested", "prompts", 1, "n", n, "choices", n)
	plan := plainChoices(n)
	preps, err := f.prepareChoices(ctx, rc, []*genRequest{g}, &plan)
	if err != nil {
		return f.connectError(rc, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	gens, err := f.startChoices(cctx, rc, preps, n)
	var run sync.WaitGroup
	defer func() {
		cancel()
		run.Wait()
		for _, g := range gens {
			if g != nil {
				g.close(rc.endpoint)
			}
		}
	}()
	if err != nil {
		return f.connectError(rc, err)
	}
	stream.ResponseHeader().Set(HeaderPrefillPath, gens[0].info.Path)
	for i, g := range gens {
		if err := stream.Send(&frontendv1.GenerateResponse{RequestId: rc.id, Prefill: g.info.proto(), Index: uint32(i)}); err != nil {
			return err
		}
	}
	events := fanIn(cctx, gens, &run)
	for left := n; left > 0; {
		var ev choiceEvent
		select {
		case ev = <-events:
		case <-ctx.Done():
			return f.connectError(rc, backendError(ctx.Err()))
		}
		if ev.err != nil {
			return f.connectError(rc, ev.err)
		}
		msg := &frontendv1.GenerateResponse{Index: uint32(ev.i), Text: ev.text, Logprobs: logprobsProto(ev.lps)}
		if ev.done {
			left--
			msg.FinishReason, msg.Usage = gens[ev.i].finish, gens[ev.i].usage().proto()
		} else if ev.text == "" && len(ev.lps) == 0 {
			continue
		}
		if err := stream.Send(msg); err != nil {
			return err
		}
	}
	f.metrics.e2e.WithLabelValues(rc.endpoint).Observe(time.Since(rc.start).Seconds())
	return nil
}
