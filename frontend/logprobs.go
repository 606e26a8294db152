package frontend

import (
	"math"
	"strings"
	"unicode/utf8"

	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/tokenizer"
)

// maxTopLogprobs is the most alternatives a request may ask for per token, as
// vLLM's default max_logprobs (OpenAI's chat API allows 20, completions 5).
const maxTopLogprobs = 20

// tokenLogprob is one generated token's log-probability and the most likely tokens
// at its position, as text: what both OpenAI formats are built from.
type tokenLogprob struct {
	text    string
	bytes   []byte
	logprob float32
	top     []topLogprob
	// none: the token has no logprob (a prompt's first, which nothing precedes);
	// its logprob and alternatives are null.
	none bool
}

type topLogprob struct {
	text    string
	bytes   []byte
	logprob float32
}

// finiteLogprob keeps JSON encodable what an engine may report as -Inf, with the
// stand-in vLLM uses.
func finiteLogprob(x float32) float32 {
	if math.IsInf(float64(x), -1) || math.IsNaN(float64(x)) {
		return -9999
	}
	return x
}

// logprobOf renders token id's logprobs with tok's pieces. A piece that is part of a
// multi-byte character is shown with U+FFFD; its bytes are exact.
func logprobOf(tok tokenizer.Tokenizer, id uint32, lp *workerv1.TokenLogprobs) tokenLogprob {
	text := func(id uint32) (string, []byte) {
		b, _ := tok.TokenBytes(id)
		return strings.ToValidUTF8(string(b), string(utf8.RuneError)), b
	}
	out := tokenLogprob{logprob: finiteLogprob(lp.GetLogprob())}
	out.text, out.bytes = text(id)
	for _, t := range lp.GetTop() {
		s, b := text(t.GetTokenId())
		out.top = append(out.top, topLogprob{text: s, bytes: b, logprob: finiteLogprob(t.GetLogprob())})
	}
	return out
}

// Chat's shape: choices[].logprobs.content, one entry per token.

type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
	Refusal *string            `json:"refusal"`
}

type chatTokenLogprob struct {
	Token       string           `json:"token"`
	Logprob     float32          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

func intBytes(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}

func chatLogprobsOf(lps []tokenLogprob) *chatLogprobs {
	if lps == nil {
		return nil
	}
	out := &chatLogprobs{Content: make([]chatTokenLogprob, len(lps))}
	for i, lp := range lps {
		e := chatTokenLogprob{Token: lp.text, Logprob: lp.logprob, Bytes: intBytes(lp.bytes), TopLogprobs: []chatTopLogprob{}}
		for _, t := range lp.top {
			e.TopLogprobs = append(e.TopLogprobs, chatTopLogprob{Token: t.text, Logprob: t.logprob, Bytes: intBytes(t.bytes)})
		}
		out.Content[i] = e
	}
	return out
}

// Completions' shape: parallel lists, top alternatives as {token: logprob}.

type completionLogprobs struct {
	Tokens []string `json:"tokens"`
	// TokenLogprobs and TopLogprobs are null for a token without a logprob (the
	// first of an echoed prompt).
	TokenLogprobs []*float32           `json:"token_logprobs"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// completionLogprobsOf lays lps out from offset, the completion text's length so far.
func completionLogprobsOf(lps []tokenLogprob, offset int) *completionLogprobs {
	if lps == nil {
		return nil
	}
	out := &completionLogprobs{Tokens: []string{}, TokenLogprobs: []*float32{}, TopLogprobs: []map[string]float32{}, TextOffset: []int{}}
	for _, lp := range lps {
		out.Tokens = append(out.Tokens, lp.text)
		out.TextOffset = append(out.TextOffset, offset)
		offset += len(lp.text)
		if lp.none {
			out.TokenLogprobs, out.TopLogprobs = append(out.TokenLogprobs, nil), append(out.TopLogprobs, nil)
			continue
		}
		out.TokenLogprobs = append(out.TokenLogprobs, &lp.logprob)
		top := make(map[string]float32, len(lp.top))
		for _, t := range lp.top {
			if _, dup := top[t.text]; !dup { // two ids may share a text; keep the likelier
				top[t.text] = t.logprob
			}
		}
		out.TopLogprobs = append(out.TopLogprobs, top)
	}
	return out
}

// requestLogprobs checks a request's logprobs fields into g.
func requestLogprobs(g *genRequest, want bool, top *int64, topParam string) error {
	if top != nil {
		if *top < 0 || *top > maxTopLogprobs {
			return invalidField(topParam, "%s %d is out of range; it must be between 0 and %d", topParam, *top, maxTopLogprobs)
		}
		g.topLogprobs = int(*top)
	}
	g.logprobs = want
	return nil
}
