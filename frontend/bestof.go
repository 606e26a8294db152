package frontend

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"connectrpc.com/connect"

	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/tokenizer"
)

// choicePlan says how a request's choices are made from its generations.
type choicePlan struct {
	// n choices per prompt are returned, the best of candidates generated
	// (best_of; candidates is n without it).
	n, candidates int
	// echo puts each prompt's text, echoTexts[i] (and, with logprobs, its
	// tokens' logprobs), before its choices' text.
	echo      bool
	echoTexts []string
	// logprobs: the client asked for logprobs. best_of asks the backend for
	// them regardless, to rank the candidates, and drops them unless asked.
	logprobs bool
}

func plainChoices(n int) choicePlan { return choicePlan{n: n, candidates: n} }

// ranked reports whether candidates are ranked and only the best kept.
func (p *choicePlan) ranked() bool { return p.candidates > p.n }

// choose makes the returned choices, prompt by prompt, from the candidates (cs,
// gens: candidates per prompt, in order): the n with the highest cumulative
// logprob, best first, as vLLM's best_of returns them; without best_of all of
// them in order. Echo puts the prompt before each.
func (p *choicePlan) choose(cs []choiceResult, gens []*generation) ([]choiceResult, error) {
	out := make([]choiceResult, 0, len(cs)/p.candidates*p.n)
	for first := 0; first < len(cs); first += p.candidates {
		group := cs[first : first+p.candidates]
		order := make([]int, len(group))
		for i := range order {
			order[i] = i
		}
		if p.ranked() {
			sums := make([]float64, len(group))
			for i, c := range group {
				if gens[first+i].lpMissing > 0 {
					return nil, invalidField("best_of", "best_of ranks candidates by their logprobs, and the engine serving this model reports none")
				}
				for _, lp := range c.lps {
					sums[i] += float64(lp.logprob)
				}
			}
			// Stable: of equal sums, the earlier candidate first.
			slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(sums[b], sums[a]) })
			order = order[:p.n]
		}
		for _, i := range order {
			c := group[i]
			if !p.logprobs {
				c.lps = nil
			}
			if p.echo {
				c = p.echoed(c, first/p.candidates, gens[first])
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// echoed is c with prompt pi's text, and its tokens' logprobs (computed by the
// prompt's first generation, lead), put before its own.
func (p *choicePlan) echoed(c choiceResult, pi int, lead *generation) choiceResult {
	c.text = p.echoTexts[pi] + c.text
	if p.logprobs {
		c.lps = slices.Concat(lead.promptLPs, c.lps)
	}
	return c
}

// backendRefusal names echo as the field at fault when the backend refused to
// compute the prompt's logprobs (an engine that cannot: the sim engine, SGLang,
// TensorRT-LLM).
func (p *choicePlan) backendRefusal(err error) error {
	ae := asAPIError(err)
	if p.echo && p.logprobs && ae.code == connect.CodeInvalidArgument && ae.param == "" && strings.Contains(ae.msg, "prompt logprobs") {
		named := *ae
		named.param = "echo"
		named.msg += " (echo with logprobs asks for the prompt's logprobs; without logprobs echo needs none)"
		return &named
	}
	return err
}

// promptLogprobsOf renders a prompt's logprobs as the backend sent them, one per
// token after the first: the first token has none, as OpenAI's echo shows it.
func promptLogprobsOf(tok tokenizer.Tokenizer, ids []uint32, lps []*workerv1.TokenLogprobs) ([]tokenLogprob, error) {
	if len(lps) != len(ids)-1 {
		return nil, &apiError{code: connect.CodeInternal, upstream: true,
			msg: fmt.Sprintf("backend: %d prompt logprobs for a prompt of %d tokens, want %d", len(lps), len(ids), len(ids)-1)}
	}
	out := make([]tokenLogprob, len(ids))
	out[0] = logprobOf(tok, ids[0], nil)
	out[0].none = true
	for i, lp := range lps {
		out[i+1] = logprobOf(tok, ids[i+1], lp)
	}
	return out, nil
}

// maxBestOf bounds best_of, as maxN bounds n: each candidate is a generation.
const maxBestOf = maxN

// completionPlan checks a completions request's n, best_of and echo (g holds the
// rest of it) into a plan. best_of follows vLLM before its V1 engine (which
// dropped it) and OpenAI's legacy API: best_of >= n candidates generated, the n
// with the highest cumulative logprob returned; not streamed, and refused with
// greedy sampling, whose candidates are all the same.
func (f *Frontend) completionPlan(req *completionRequest, g *genRequest) (choicePlan, error) {
	plan := plainChoices(req.choices())
	plan.echo, plan.logprobs = req.Echo, g.logprobs
	if b := req.BestOf; b != nil {
		switch {
		case *b < 1 || *b > maxBestOf:
			return plan, invalidField("best_of", "best_of=%d is out of range; it must be between 1 and %d", *b, maxBestOf)
		case *b < int64(plan.n):
			return plan, invalidField("best_of", "best_of=%d must be greater than or equal to n=%d", *b, plan.n)
		}
		plan.candidates = int(*b)
	}
	if plan.ranked() {
		temp := float64(f.cfg.DefaultTemperature)
		if g.temperature != nil {
			temp = *g.temperature
		}
		switch {
		case req.Stream:
			return plan, invalidField("best_of", "best_of=%d with n=%d cannot be streamed: the best candidates are known only when all have finished; "+
				"set stream to false, or best_of to n", plan.candidates, plan.n)
		case temp == 0:
			return plan, invalidField("best_of", "best_of=%d with greedy sampling (temperature 0) generates %d identical candidates; "+
				"set a temperature, or best_of to n", plan.candidates, plan.candidates)
		}
	}
	if req.Echo {
		g.promptLogprobs = g.logprobs
	}
	return plan, nil
}

// echoTexts are the prompts as echo shows them: a text prompt as given, token
// ids as their text (vLLM's detokenized prompt).
func echoTexts(m *Model, prompts []*genRequest) []string {
	out := make([]string, len(prompts))
	for i, g := range prompts {
		if g.promptIDs != nil {
			out[i] = m.Tokenizer.Decode(g.promptIDs)
		} else {
			out[i] = g.prompt
		}
	}
	return out
}
