package frontend

// responseFormat builds the JSON bodies of one endpoint, whole or streamed. The
// "tandem" extension (how the prompt was prefilled, where it ran) goes on the
// whole response and on the first chunk.
type responseFormat interface {
	whole(text, finish string, u usage, info *prefillInfo) any
	first(info *prefillInfo) any
	delta(text string) any
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

func (c *chatFormat) whole(text, finish string, u usage, info *prefillInfo) any {
	return &chatCompletion{
		ID: c.id, Object: "chat.completion", Created: c.created, Model: c.model,
		Choices: []chatChoice{{Message: chatMessageOut{Role: "assistant", Content: text}, FinishReason: finish}},
		Usage:   u.json(), Tandem: info,
	}
}

func (c *chatFormat) first(info *prefillInfo) any {
	empty := ""
	ch := c.chunk([]chatChunkChoice{{Delta: chatDelta{Role: "assistant", Content: &empty}}})
	ch.Tandem = info
	return ch
}

func (c *chatFormat) delta(text string) any {
	return c.chunk([]chatChunkChoice{{Delta: chatDelta{Content: &text}}})
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
}

func (c *completionFormat) chunk(choices []completionChoice) *completion {
	return &completion{ID: c.id, Object: "text_completion", Created: c.created, Model: c.model, Choices: choices}
}

func (c *completionFormat) whole(text, finish string, u usage, info *prefillInfo) any {
	ch := c.chunk([]completionChoice{{Text: text, FinishReason: &finish}})
	ch.Usage, ch.Tandem = u.json(), info
	return ch
}

func (c *completionFormat) first(info *prefillInfo) any {
	ch := c.chunk([]completionChoice{{}})
	ch.Tandem = info
	return ch
}

func (c *completionFormat) delta(text string) any {
	return c.chunk([]completionChoice{{Text: text}})
}

func (c *completionFormat) finish(reason string) any {
	return c.chunk([]completionChoice{{FinishReason: &reason}})
}

func (c *completionFormat) usage(u usage) any {
	ch := c.chunk([]completionChoice{})
	ch.Usage = u.json()
	return ch
}
