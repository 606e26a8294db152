package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/tandem-serve/tandem/tokenizer"
)

// Endpoints the client can drive.
const (
	EndpointCompletions = "completions"
	EndpointChat        = "chat"
)

// HeaderPrefillPath is the response header in which tandem says how a prompt was
// prefilled (local, remote, fallback).
const HeaderPrefillPath = "X-Tandem-Prefill-Path"

// Client sends streaming requests to an OpenAI-compatible server.
type Client struct {
	// URL is the server's base URL, with or without a trailing /v1.
	URL string
	// Endpoint is EndpointCompletions or EndpointChat.
	Endpoint string
	// Model is sent as "model"; "" sends none (tandem then uses its one model).
	Model  string
	APIKey string
	// Temperature, when set, is sent; otherwise the server's default applies.
	Temperature *float64
	// Tokenizer counts output tokens when the server sends no usage; nil counts
	// content chunks instead.
	Tokenizer tokenizer.Tokenizer
	// HTTP is the client to use; nil means a client with no overall timeout.
	HTTP *http.Client
	// Timeout bounds one request; 0 means none beyond the context's.
	Timeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Validate checks the fields a request needs.
func (c *Client) Validate() error {
	if c.URL == "" {
		return errors.New("bench: a server URL is required")
	}
	if !strings.HasPrefix(c.URL, "http://") && !strings.HasPrefix(c.URL, "https://") {
		return fmt.Errorf("bench: URL %q must start with http:// or https://", c.URL)
	}
	if c.Endpoint != EndpointCompletions && c.Endpoint != EndpointChat {
		return fmt.Errorf("bench: endpoint %q must be %q or %q", c.Endpoint, EndpointCompletions, EndpointChat)
	}
	return nil
}

// base returns the URL up to and including /v1.
func (c *Client) base() string {
	u := strings.TrimRight(c.URL, "/")
	if !strings.HasSuffix(u, "/v1") {
		u += "/v1"
	}
	return u
}

func (c *Client) path() string {
	if c.Endpoint == EndpointChat {
		return c.base() + "/chat/completions"
	}
	return c.base() + "/completions"
}

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

func (c *Client) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Client) authorize(req *http.Request) {
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type requestBody struct {
	Model         string        `json:"model,omitempty"`
	Prompt        promptValue   `json:"prompt,omitzero"`
	Messages      []Message     `json:"messages,omitempty"`
	MaxTokens     int           `json:"max_tokens,omitempty"`
	IgnoreEOS     bool          `json:"ignore_eos,omitempty"`
	Temperature   *float64      `json:"temperature,omitempty"`
	Stream        bool          `json:"stream"`
	StreamOptions streamOptions `json:"stream_options"`
}

func (c *Client) body(r Request) ([]byte, error) {
	b := requestBody{
		Model: c.Model, MaxTokens: r.MaxTokens, IgnoreEOS: r.IgnoreEOS, Temperature: c.Temperature,
		Stream: true, StreamOptions: streamOptions{IncludeUsage: true},
	}
	if r.PromptIDs != nil {
		if c.Endpoint == EndpointChat {
			return nil, errors.New("a prompt of token ids needs the completions endpoint")
		}
		b.Prompt.ids = r.PromptIDs
		return json.Marshal(b)
	}
	if c.Endpoint == EndpointChat {
		b.Messages = r.Messages
		if len(b.Messages) == 0 {
			b.Messages = []Message{{Role: "user", Content: r.Prompt}}
		}
	} else {
		p := r.Prompt
		if p == "" && len(r.Messages) > 0 {
			p = flatten(r.Messages)
		}
		b.Prompt.text = &p
	}
	return json.Marshal(b)
}

// promptValue is /v1/completions' prompt: text, or a list of token ids.
type promptValue struct {
	text *string
	ids  []uint32
}

func (p promptValue) IsZero() bool { return p.text == nil && p.ids == nil }

func (p promptValue) MarshalJSON() ([]byte, error) {
	if p.ids != nil {
		return json.Marshal(p.ids)
	}
	return json.Marshal(p.text)
}

// UnmarshalJSON reads either form back, for tests that check what was sent.
func (p *promptValue) UnmarshalJSON(b []byte) error {
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte("[")) {
		return json.Unmarshal(b, &p.ids)
	}
	return json.Unmarshal(b, &p.text)
}

// flatten renders a conversation as plain text for /v1/completions: the contents
// one after another, each turn on its own paragraph.
func flatten(msgs []Message) string {
	parts := make([]string, len(msgs))
	for i, m := range msgs {
		parts[i] = m.Content
	}
	return strings.Join(parts, "\n\n")
}

// chunk is one server-sent event of a chat or completions stream.
type chunk struct {
	Choices []struct {
		Text  *string `json:"text"`
		Delta struct {
			Content          *string `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error"`
	Tandem *struct {
		PrefillPath string `json:"prefill_path"`
	} `json:"tandem"`
}

// content returns the text a chunk carries.
func (c *chunk) content() string {
	var sb strings.Builder
	for _, ch := range c.Choices {
		for _, s := range []*string{ch.Text, ch.Delta.Content, ch.Delta.ReasoningContent} {
			if s != nil {
				sb.WriteString(*s)
			}
		}
	}
	return sb.String()
}

// Do sends r as a streaming request and measures it. It never returns an error:
// a failure is recorded in the Result.
func (c *Client) Do(ctx context.Context, r Request) Result {
	res := Result{Class: r.Class, PromptTokens: r.PromptTokens}
	if res.WantTokens = r.WantTokens; res.WantTokens == 0 && r.IgnoreEOS {
		res.WantTokens = r.MaxTokens
	}
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	body, err := c.body(r)
	if err != nil {
		res.Err = err.Error()
		return res
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.path(), bytes.NewReader(body))
	if err != nil {
		res.Err = err.Error()
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	c.authorize(req)

	start := c.now()
	resp, err := c.http().Do(req)
	if err != nil {
		res.Err = err.Error()
		res.E2E = c.now().Sub(start)
		return res
	}
	defer resp.Body.Close()
	res.PrefillPath = resp.Header.Get(HeaderPrefillPath)
	if resp.StatusCode != http.StatusOK {
		res.Err = httpError(resp)
		res.E2E = c.now().Sub(start)
		return res
	}
	c.readStream(resp.Body, start, &res)
	return res
}

// readStream reads server-sent events until [DONE] or the end of the body.
func (c *Client) readStream(body io.Reader, start time.Time, res *Result) {
	var (
		text     strings.Builder
		last     time.Time
		sawDone  bool
		lastSeen = start
	)
	br := bufio.NewReaderSize(body, 64<<10)
	for {
		line, err := br.ReadString('\n')
		now := c.now()
		if line = strings.TrimRight(line, "\r\n"); strings.HasPrefix(line, "data:") {
			data := strings.TrimSpace(strings.TrimPrefix(line, "data:"))
			lastSeen = now
			if data == "[DONE]" {
				sawDone = true
				break
			}
			var ch chunk
			if jerr := json.Unmarshal([]byte(data), &ch); jerr != nil {
				res.Err = fmt.Sprintf("bad event %.80q: %v", data, jerr)
				break
			}
			if ch.Error != nil {
				res.Err = "stream error: " + ch.Error.Message
				break
			}
			if ch.Tandem != nil && res.PrefillPath == "" {
				res.PrefillPath = ch.Tandem.PrefillPath
			}
			if ch.Usage != nil {
				res.UsageReported = true
				res.OutputTokens = ch.Usage.CompletionTokens
				res.PromptTokens = ch.Usage.PromptTokens
				if d := ch.Usage.PromptTokensDetails; d != nil {
					res.CachedTokens, res.CachedReported = d.CachedTokens, true
				}
			}
			if s := ch.content(); s != "" {
				if res.Chunks == 0 {
					res.TTFT = now.Sub(start)
				} else {
					res.ITL = append(res.ITL, now.Sub(last))
				}
				last = now
				res.Chunks++
				text.WriteString(s)
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				res.Err = err.Error()
			}
			break
		}
	}
	res.E2E = lastSeen.Sub(start)
	res.text = text.String()
	switch {
	case res.Err != "":
	case res.Chunks == 0:
		res.Err = "no content received"
	case !sawDone:
		res.Err = "stream ended without [DONE]"
	}
	if !res.UsageReported {
		res.OutputTokens = res.Chunks
		if c.Tokenizer != nil {
			res.OutputTokens = len(c.Tokenizer.Encode(res.text))
		}
	}
}

// httpError describes a non-200 answer, with the OpenAI error message if any.
func httpError(resp *http.Response) string {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
		return fmt.Sprintf("HTTP %d: %s", resp.StatusCode, e.Error.Message)
	}
	return fmt.Sprintf("HTTP %d: %.200s", resp.StatusCode, strings.TrimSpace(string(b)))
}
