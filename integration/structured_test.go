package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// personSchema bounds every string and array, so that even a random-weight model
// (whose text the mask alone shapes) ends its answer well within max_tokens.
var personSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"name":    map[string]any{"type": "string", "minLength": 1, "maxLength": 16},
		"age":     map[string]any{"type": "integer"},
		"pets":    map[string]any{"type": "array", "items": map[string]any{"enum": []string{"cat", "dog", "fish"}}, "maxItems": 3},
		"married": map[string]any{"type": "boolean"},
	},
	"required":             []string{"name", "age", "married"},
	"additionalProperties": false,
}

type person struct {
	Name    string   `json:"name"`
	Age     int64    `json:"age"`
	Pets    []string `json:"pets"`
	Married *bool    `json:"married"`
}

// checkPerson parses text strictly into a person and checks the schema's bounds.
func checkPerson(text string) error {
	var p person
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("text after the object")
	}
	if n := len([]rune(p.Name)); n < 1 || n > 16 || len(p.Pets) > 3 || p.Married == nil {
		return fmt.Errorf("breaks the schema: %+v", p)
	}
	for _, pet := range p.Pets {
		if pet != "cat" && pet != "dog" && pet != "fish" {
			return fmt.Errorf("pet %q is not in the enum", pet)
		}
	}
	return nil
}

func personFormat() openai.ChatCompletionNewParamsResponseFormatUnion {
	return openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
		JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "person", Schema: personSchema, Strict: openai.Bool(true)}}}
}

// chatJSON asks for one answer, streamed or not, and returns its text and finish reason.
func chatJSON(ctx context.Context, c openai.Client, p openai.ChatCompletionNewParams, stream bool, opts ...option.RequestOption) (string, string, error) {
	if !stream {
		r, err := c.Chat.Completions.New(ctx, p, opts...)
		if err != nil {
			return "", "", err
		}
		return r.Choices[0].Message.Content, string(r.Choices[0].FinishReason), nil
	}
	s := c.Chat.Completions.NewStreaming(ctx, p, opts...)
	var text strings.Builder
	finish := ""
	for s.Next() {
		for _, ch := range s.Current().Choices {
			text.WriteString(ch.Delta.Content)
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
		}
	}
	return text.String(), finish, s.Err()
}

// Through the OpenAI SDK and `tandem up`: a json_schema answer parses into a Go
// struct and keeps the schema for 100 seeds at temperature 1, streamed and not, on
// stories260K and on random weights (where only the mask makes the text JSON);
// json_object gives an object; a schema outside the subset is a 400 naming the keyword.
func TestStructuredOutputs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   []string
		model string
	}{{"stories260K", nil, "stories260K"}, {"random", []string{fixtureModel}, "tandem-tiny"}} {
		t.Run(tc.name, func(t *testing.T) {
			_, url := startUpWith(t, tc.env)
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			c := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
			var wg sync.WaitGroup
			errs := make(chan error, 100)
			sem := make(chan struct{}, 8)
			for seed := range int64(100) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sem <- struct{}{}
					defer func() { <-sem }()
					text, finish, err := chatJSON(ctx, c, openai.ChatCompletionNewParams{
						Model:          tc.model,
						Messages:       []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Describe a person as JSON.")},
						Temperature:    openai.Float(1),
						Seed:           openai.Int(seed),
						MaxTokens:      openai.Int(256),
						ResponseFormat: personFormat(),
					}, seed%2 == 1)
					if err == nil && finish != "stop" {
						err = fmt.Errorf("finish %q", finish)
					}
					if err == nil {
						err = checkPerson(text)
					}
					if err != nil {
						errs <- fmt.Errorf("seed %d (streamed %v): %q: %w", seed, seed%2 == 1, text, err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}

			// json_object on /v1/completions too, where the SDK has no field for it.
			for seed := range int64(6) {
				cp, err := c.Completions.New(ctx, openai.CompletionNewParams{
					Model: openai.CompletionNewParamsModel(tc.model), Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
					MaxTokens: openai.Int(400), Temperature: openai.Float(0.7), Seed: openai.Int(seed),
				}, option.WithJSONSet("response_format", map[string]string{"type": "json_object"}))
				if err != nil {
					t.Fatal(err)
				}
				text := cp.Choices[0].Text
				var obj map[string]any
				if cp.Choices[0].FinishReason == "stop" && json.Unmarshal([]byte(text), &obj) != nil {
					t.Errorf("json_object seed %d: %q is not a JSON object", seed, text)
				}
				if !strings.HasPrefix(strings.TrimSpace(text), "{") {
					t.Errorf("json_object seed %d: %q does not start an object", seed, text)
				}
			}

			bad := personFormat()
			bad.OfJSONSchema.JSONSchema.Schema = map[string]any{"type": "string", "pattern": "^a+$"}
			_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: tc.model, ResponseFormat: bad,
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "response_format" || !strings.Contains(apiErr.Message, `"pattern"`) {
				t.Errorf("a pattern schema: %v, want a 400 naming the keyword", err)
			}
		})
	}
}

// A prompt over the threshold is prefilled on the prefill worker, which draws
// the first token under the constraint; the decode worker continues the same
// parse, and the answer is still valid.
func TestStructuredOutputsRemotePrefill(t *testing.T) {
	_, url := startUp(t, "--short-prefill-threshold", "32")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	for seed := range int64(12) {
		var raw *http.Response
		text, finish, err := chatJSON(ctx, c, openai.ChatCompletionNewParams{
			Model:          "tandem-tiny",
			Messages:       []openai.ChatCompletionMessageParamUnion{openai.UserMessage(longPrompt(int(seed), 300))},
			Temperature:    openai.Float(1),
			Seed:           openai.Int(seed),
			MaxTokens:      openai.Int(256),
			ResponseFormat: personFormat(),
		}, seed%2 == 1, option.WithResponseInto(&raw))
		if err != nil {
			t.Fatal(err)
		}
		if path := raw.Header.Get("X-Tandem-Prefill-Path"); path != "remote" {
			t.Fatalf("seed %d: prefill path %q, want remote", seed, path)
		}
		if finish != "stop" {
			t.Errorf("seed %d: finish %q: %q", seed, finish, text)
		} else if err := checkPerson(text); err != nil {
			t.Errorf("seed %d: %q: %v", seed, text, err)
		}
	}
}
