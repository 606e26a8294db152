package frontend

// responseFormat builds the JSON bodies of one endpoint, whole or streamed. The
// "tandem" extension (how the prompt was prefilled, where it ran) goes on the
// whole response and on the first chunk.
type responseFormat interface {
	// lps are the tokens' logprobs, nil when the request did not ask for them.
	whole(text, finish string, u usage, info *prefillInfo, lps []tokenLogprob) any
	first(info *prefillInfo) any
	delta(text string, lps []tokenLogprob) any
	finish(reason string) any
	usage(u usage) any
}

type chatFormat struct {
	id, model string
	created   int64
}

func (c *chatFormat) chunk(choices []chatChunkChoice) *chatChunk {
	return &chatChunk{ID: c.id, Object: "chat.completion.chunk", Created: c.created, Model: c.model, Choices: choices}
}

func (c *chatFormat) whole(text, finish string, u usage, info *prefillInfo, lps []tokenLogprob) any {
	return &chatCompletion{
		ID: c.id, Object: "chat.completion", Created: c.created, Model: c.model,
		Choices: []chatChoice{{Message: chatMessageOut{Role: "assistant", Content: &text}, FinishReason: finish, Logprobs: chatLogprobsOf(lps)}},
		Usage:   u.json(), Tandem: info,
	}
}

func (c *chatFormat) first(info *prefillInfo) any {
	empty := ""
	ch := c.chunk([]chatChunkChoice{{Delta: chatDelta{Role: "assistant", Content: &empty}}})
	ch.Tandem = info
	return ch
}

func (c *chatFormat) delta(text string, lps []tokenLogprob) any {
	return c.chunk([]chatChunkChoice{{Delta: chatDelta{Content: &text}, Logprobs: chatLogprobsOf(lps)}})
}

func (c *chatFormat) finish(reason string) any {
	return c.chunk([]chatChunkChoice{{FinishReason: &reason}})
}

func (c *chatFormat) usage(u usage) any {
	ch := c.chunk([]chatChunkChoice{})
	ch.Usage = u.json()
	return ch
}

type completionFormat struct {
	id, model string
	created   int64
	offset    int   // text streamed so far, for logprobs' text_offset
	offsets   []int // the same per choice, when there are several
}

func (c *completionFormat) chunk(choices []completionChoice) *completion {
	return &completion{ID: c.id, Object: "text_completion", Created: c.created, Model: c.model, Choices: choices}
}

func (c *completionFormat) whole(text, finish string, u usage, info *prefillInfo, lps []tokenLogprob) any {
	ch := c.chunk([]completionChoice{{Text: text, FinishReason: &finish, Logprobs: completionLogprobsOf(lps, 0)}})
	ch.Usage, ch.Tandem = u.json(), info
	return ch
}

func (c *completionFormat) first(info *prefillInfo) any {
	ch := c.chunk([]completionChoice{{}})
	ch.Tandem = info
	return ch
}

func (c *completionFormat) delta(text string, lps []tokenLogprob) any {
	ch := c.chunk([]completionChoice{{Text: text, Logprobs: completionLogprobsOf(lps, c.offset)}})
	for _, lp := range lps {
		c.offset += len(lp.text)
	}
	return ch
}

func (c *completionFormat) finish(reason string) any {
	return c.chunk([]completionChoice{{FinishReason: &reason}})
}

func (c *completionFormat) usage(u usage) any {
	ch := c.chunk([]completionChoice{})
	ch.Usage = u.json()
	return ch
}
