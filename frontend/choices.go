package frontend

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
)

// Bounds on one request's fan-out: each choice is a generation on the backend,
// so a client must not be able to ask for hundreds with one request.
const (
	maxN       = 16
	maxPrompts = 64
	maxChoices = 64
)

// choices is the request's n, 1 when not given (toGen has checked its range).
func (s *samplingFields) choices() int {
	if s.N == nil {
		return 1
	}
	return int(*s.N)
}

// batch is g once per prompt of a batched /v1/completions request.
func batch(g *genRequest, p *promptField) []*genRequest {
	if p.Count <= 1 {
		return []*genRequest{g}
	}
	out := make([]*genRequest, p.Count)
	for i := range out {
		c := *g
		if p.IsIDs {
			c.prompt, c.promptIDs = "", p.IDSets[i]
			if c.promptIDs == nil {
				c.promptIDs = []uint32{}
			}
		} else {
			c.prompt, c.promptIDs = p.Texts[i], nil
		}
		out[i] = &c
	}
	return out
}

// choicesFormat builds the bodies of a response with several choices, each
// carrying its index; OpenAI numbers them prompt_index*n + i.
type choicesFormat interface {
	wholeChoices(cs []choiceResult, u usage) any
	firstAt(i int, info *prefillInfo) any
	deltaAt(i int, text string, lps []tokenLogprob) any
	finishAt(i int, reason string) any
	usage(u usage) any
}

type choiceResult struct {
	text, finish string
	lps          []tokenLogprob
	info         *prefillInfo
}

type choiceEvent struct {
	i    int
	text string
	lps  []tokenLogprob
	done bool
	err  error
}

// prepareChoices tokenizes each prompt once and makes plan.candidates requests of
// it, each with its own request id (so admission, routing and cancellation work
// per choice) and its own seed (so sampled choices differ; seed+i when the client
// gave one). Only a prompt's first request asks for the prompt's logprobs (echo):
// they are the same for all.
func (f *Frontend) prepareChoices(ctx context.Context, rc *reqCtx, prompts []*genRequest, plan *choicePlan) ([]*prepared, error) {
	per := plan.candidates
	preps := make([]*prepared, 0, len(prompts)*per)
	for pi, g := range prompts {
		p, err := f.prepareTraced(ctx, g)
		if err != nil {
			if len(prompts) > 1 {
				ae := *asAPIError(err)
				ae.msg = fmt.Sprintf("prompt %d: %s", pi, ae.msg)
				err = &ae
			}
			return nil, err
		}
		if plan.ranked() {
			p.req.Sampling.Logprobs = true
		}
		for i := range per {
			q := *p
			q.req = proto.Clone(p.req).(*decodev1.GenerateRequest)
			q.req.RequestId = fmt.Sprintf("%s-%d", rc.id, pi*per+i)
			switch {
			case i == 0:
			case g.seed != nil:
				q.req.Sampling.Seed = *g.seed + uint64(i)
			default:
				q.req.Sampling.Seed = rand.Uint64()
			}
			if i > 0 {
				q.req.PromptLogprobs = false
			}
			preps = append(preps, &q)
		}
	}
	return preps, nil
}

// startChoices starts every choice. What is shared: the first choice of each
// prompt is started alone and the others only once its first token is back, so
// its prefill is done and on an engine with a prefix cache (the native one among
// them) the others find the prompt's KV there rather than prefilling it again;
// the router, seeing the same prefix, sends them to the same worker. Prompts of
// a batch start in parallel. On an error every choice started is returned for
// closing.
func (f *Frontend) startChoices(ctx context.Context, rc *reqCtx, preps []*prepared, n int) ([]*generation, error) {
	gens := make([]*generation, len(preps))
	errs := make([]error, len(preps))
	startOne := func(i int) {
		gens[i], errs[i] = f.start(ctx, preps[i], rc.log.With("choice", i, "choice_request_id", preps[i].req.GetRequestId()), rc.start)
	}
	var wg sync.WaitGroup
	for first := 0; first < len(preps); first += n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if startOne(first); errs[first] != nil {
				return
			}
			var rest sync.WaitGroup
			for i := first + 1; i < first+n; i++ {
				rest.Add(1)
				go func() { defer rest.Done(); startOne(i) }()
			}
			rest.Wait()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return gens, err
		}
	}
	return gens, nil
}

// serveChoices answers a request for several choices (n > 1, best_of or a batch
// of prompts; echo too): one generation per candidate through the ordinary path,
// fanned in. In a stream the choices' chunks interleave as their tokens arrive.
func (f *Frontend) serveChoices(w http.ResponseWriter, r *http.Request, rc *reqCtx, prompts []*genRequest, plan choicePlan,
	s *samplingFields, out choicesFormat) {
	total := len(prompts) * plan.candidates
	if returned := len(prompts) * plan.n; returned > 1 {
		f.metrics.choiceRequests.WithLabelValues(rc.endpoint).Inc()
		f.metrics.choices.WithLabelValues(rc.endpoint).Add(float64(returned))
		rc.log.Info("several choices requested", "prompts", len(prompts), "n", plan.n, "best_of", plan.candidates, "choices", returned)
	}
	if m := f.cfg.MaxInFlight; m > 0 && total > m {
		// Each choice holds an admission slot until the answer is written: more
		// choices than slots would wait for one another until the queue timed out.
		field := "n"
		if plan.ranked() {
			field = "best_of"
		}
		f.writeError(w, rc, invalidField(field, "%d choices asked for, but this server generates at most %d requests at once", total, m))
		return
	}
	preps, err := f.prepareChoices(r.Context(), rc, prompts, &plan)
	if err != nil {
		f.writeError(w, rc, err)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	gens, err := f.startChoices(ctx, rc, preps, plan.candidates)
	var run sync.WaitGroup
	// Every choice ends when the request does, the client gone or one choice
	// failed; the generations are closed only once nothing reads them.
	defer func() {
		cancel()
		run.Wait()
		for _, g := range gens {
			if g != nil {
				g.close(rc.endpoint)
			}
		}
	}()
	if err != nil && r.Context().Err() != nil {
		w.WriteHeader(statusClientClosed)
		return
	}
	if err != nil {
		f.writeError(w, rc, plan.backendRefusal(err))
		return
	}
	w.Header().Set(HeaderPrefillPath, gens[0].info.Path)

	events := fanIn(ctx, gens, &run)
	if s.Stream {
		f.streamChoices(w, r, rc, gens, &plan, s, out, events)
		return
	}
	results := make([]choiceResult, total)
	texts := make([]strings.Builder, total)
	for left := total; left > 0; {
		var ev choiceEvent
		select {
		case ev = <-events:
		case <-r.Context().Done():
			rc.log.Info("client went away before the answer", "err", r.Context().Err())
			w.WriteHeader(statusClientClosed)
			return
		}
		if ev.err != nil && r.Context().Err() != nil {
			rc.log.Info("client went away before the answer", "err", ev.err)
			w.WriteHeader(statusClientClosed)
			return
		}
		if ev.err != nil {
			f.writeError(w, rc, ev.err)
			return
		}
		texts[ev.i].WriteString(ev.text)
		results[ev.i].lps = append(results[ev.i].lps, ev.lps...)
		if ev.done {
			left--
		}
	}
	for i, g := range gens {
		results[i].text, results[i].finish, results[i].info = texts[i].String(), g.finish, &g.info
		if !preps[i].req.GetSampling().GetLogprobs() {
			results[i].lps = nil
		} else if results[i].lps == nil {
			results[i].lps = []tokenLogprob{}
		}
	}
	chosen, err := plan.choose(results, gens)
	if err != nil {
		f.writeError(w, rc, err)
		return
	}
	writeJSON(w, http.StatusOK, out.wholeChoices(chosen, sumUsage(gens, plan.candidates)))
}

// fanIn reads every generation on a goroutine of its own (counted in run) and
// sends what each produces, until it is done or ctx ends.
func fanIn(ctx context.Context, gens []*generation, run *sync.WaitGroup) <-chan choiceEvent {
	events := make(chan choiceEvent)
	for i, g := range gens {
		run.Add(1)
		go func() {
			defer run.Done()
			for {
				text, done, err := g.next()
				ev := choiceEvent{i: i, text: text, lps: g.takeLogprobs(), done: done, err: err}
				select {
				case events <- ev:
				case <-ctx.Done():
					return
				}
				if done || err != nil {
					return
				}
			}
		}()
	}
	return events
}

// streamChoices streams every generation as a choice: best_of with more
// candidates than n is never streamed (a choice is known only at the end).
func (f *Frontend) streamChoices(w http.ResponseWriter, r *http.Request, rc *reqCtx, gens []*generation, plan *choicePlan,
	s *samplingFields, out choicesFormat, events <-chan choiceEvent) {
	n := plan.n
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	sse := &sseWriter{w: w, rc: http.NewResponseController(w)}
	sse.hold = true
	for i, g := range gens {
		sse.send(out.firstAt(i, &g.info))
	}
	if plan.echo {
		// The prompt comes first, with its tokens' logprobs when asked.
		for i := range gens {
			var lps []tokenLogprob
			if plan.logprobs {
				lps = gens[i/n*n].promptLPs
			}
			sse.send(out.deltaAt(i, plan.echoTexts[i/n], lps))
		}
	}
	sse.hold = false
	for left := len(gens); left > 0 && sse.err == nil; {
		var ev choiceEvent
		select {
		case ev = <-events:
		case <-r.Context().Done():
			rc.log.Info("client went away during the stream", "err", r.Context().Err())
			return
		}
		if ev.err != nil {
			if r.Context().Err() != nil {
				rc.log.Info("client went away during the stream", "err", ev.err)
				return
			}
			rc.log.Warn("stream failed after it started", "choice", ev.i, "err", ev.err)
			sse.send(asAPIError(ev.err).openAI())
			sse.done()
			return
		}
		if ev.text != "" || ev.lps != nil {
			sse.send(out.deltaAt(ev.i, ev.text, ev.lps))
		}
		if ev.done {
			left--
			sse.send(out.finishAt(ev.i, gens[ev.i].finish))
		}
	}
	if s.StreamOptions != nil && s.StreamOptions.IncludeUsage {
		sse.send(out.usage(sumUsage(gens, n)))
	}
	sse.done()
	if sse.err != nil {
		rc.log.Info("client went away during the stream", "err", sse.err)
	}
}

// sumUsage counts each prompt once, as OpenAI bills n choices of one prompt, and
// every choice's completion; cached tokens are those of each prompt's first choice.
func sumUsage(gens []*generation, n int) usage {
	var u usage
	for i, g := range gens {
		gu := g.usage()
		if i%n == 0 {
			u.prompt += gu.prompt
			u.cached += gu.cached
		}
		u.completion += gu.completion
	}
	return u
}

func (c *chatFormat) wholeChoices(cs []choiceResult, u usage) any {
	resp := &chatCompletion{ID: c.id, Object: "chat.completion", Created: c.created, Model: c.model, Usage: u.json(), Tandem: cs[0].info}
	for i, r := range cs {
		resp.Choices = append(resp.Choices, chatChoice{Index: i, Message: chatMessageOut{Role: "assistant", Content: &r.text},
			FinishReason: r.finish, Logprobs: chatLogprobsOf(r.lps)})
	}
	return resp
}

func (c *chatFormat) firstAt(i int, info *prefillInfo) any {
	empty := ""
	ch := c.chunk([]chatChunkChoice{{Index: i, Delta: chatDelta{Role: "assistant", Content: &empty}}})
	ch.Tandem = info
	return ch
}

func (c *chatFormat) deltaAt(i int, text string, lps []tokenLogprob) any {
	return c.chunk([]chatChunkChoice{{Index: i, Delta: chatDelta{Content: &text}, Logprobs: chatLogprobsOf(lps)}})
}

func (c *chatFormat) finishAt(i int, reason string) any {
	return c.chunk([]chatChunkChoice{{Index: i, FinishReason: &reason}})
}

func (c *completionFormat) wholeChoices(cs []choiceResult, u usage) any {
	resp := c.chunk(nil)
	for i, r := range cs {
		resp.Choices = append(resp.Choices, completionChoice{Index: i, Text: r.text, FinishReason: &r.finish,
			Logprobs: completionLogprobsOf(r.lps, 0)})
	}
	resp.Usage, resp.Tandem = u.json(), cs[0].info
	return resp
}

func (c *completionFormat) firstAt(i int, info *prefillInfo) any {
	ch := c.chunk([]completionChoice{{Index: i}})
	ch.Tandem = info
	return ch
}

func (c *completionFormat) deltaAt(i int, text string, lps []tokenLogprob) any {
	for len(c.offsets) <= i {
		c.offsets = append(c.offsets, 0)
	}
	ch := c.chunk([]completionChoice{{Index: i, Text: text, Logprobs: completionLogprobsOf(lps, c.offsets[i])}})
	for _, lp := range lps {
		c.offsets[i] += len(lp.text)
	}
	return ch
}

func (c *completionFormat) finishAt(i int, reason string) any {
	return c.chunk([]completionChoice{{Index: i, FinishReason: &reason}})
}
