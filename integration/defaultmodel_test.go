package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// A new user runs `tandem up` with no flags and asks for a story through the
// OpenAI SDK: the embedded stories260K answers, at temperature 0, with the text
// llama2.c's own test prints for it, whether its prompt was prefilled on the
// decode worker, on the prefill worker, or over a cached prefix.
func TestDefaultModelTellsAStory(t *testing.T) {
	_, url := startUpWith(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))

	models, err := client.Models.List(ctx)
	if err != nil || len(models.Data) != 1 || models.Data[0].ID != "stories260K" {
		t.Fatalf("models: %+v, %v", models, err)
	}
	c, err := client.Completions.New(ctx, openai.CompletionNewParams{
		Model:       "stories260K",
		Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens:   openai.Int(40),
		Temperature: openai.Float(0),
	})
	if err != nil {
		t.Fatal(err)
	}
	const want = ", there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball."
	if got := c.Choices[0].Text; !strings.HasPrefix(got, want) {
		t.Errorf("completion %q, want it to begin %q", got, want)
	}
	if c.Usage.PromptTokens != 5 { // BOS and four words
		t.Errorf("prompt tokens %d, want 5", c.Usage.PromptTokens)
	}

	// A prompt long enough to go to the prefill worker, then again from the decode
	// worker's cache: the same greedy answer every time.
	long := strings.Repeat("Lily and her dog played in the park. ", 12) + "Then"
	var first string
	for i := range 3 {
		c, err := client.Completions.New(ctx, openai.CompletionNewParams{
			Model:       "stories260K",
			Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String(long)},
			MaxTokens:   openai.Int(24),
			Temperature: openai.Float(0),
		})
		if err != nil {
			t.Fatal(err)
		}
		text := c.Choices[0].Text
		if i == 0 {
			first = text
			if len(strings.Fields(text)) < 5 {
				t.Errorf("answer %q is not a continuation", text)
			}
		} else if text != first {
			t.Errorf("request %d answered %q, the first %q", i, text, first)
		}
	}

	chat, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:       "stories260K",
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me a story about a cat.")},
		MaxTokens:   openai.Int(30),
		Temperature: openai.Float(0),
	})
	if err != nil || len(strings.Fields(chat.Choices[0].Message.Content)) < 5 {
		t.Fatalf("chat: %+v, %v", chat, err)
	}
}
