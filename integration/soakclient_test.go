// The soak through tandem up, client side: one streamed request, read and checked
// the way a user would see it.

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/tandem-serve/tandem/internal/testutil/soaktest"
)

func soakBody(content string, maxTokens int, temperature float64, seed uint64) string {
	b, _ := json.Marshal(map[string]any{
		"model": "tandem-tiny", "stream": true, "stream_options": map[string]any{"include_usage": true},
		"max_tokens": maxTokens, "temperature": temperature, "seed": seed,
		"messages": []map[string]string{{"role": "user", "content": content}},
	})
	return string(b)
}

// soakResult is what a client of a streamed chat completion saw.
type soakResult struct {
	status       int
	header       string // x-tandem-prefill-path
	path, reason string // the first event's tandem.prefill_path and prefill_reason
	finish       string
	completion   int // usage.completion_tokens; -1 when no usage came
	sawDone      bool
	errMsg       string // an error body or error event
	err          error
}

// soakStream posts body and reads the event stream to its end. With cancelAfter
// >= 0 it calls cancel after that many data events (0: once the headers arrive)
// and returns.
func soakStream(ctx context.Context, client *http.Client, url, body string, cancelAfter int, cancel func()) soakResult {
	r := soakResult{completion: -1}
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		r.err = err
		return r
	}
	defer resp.Body.Close()
	r.status, r.header = resp.StatusCode, resp.Header.Get("X-Tandem-Prefill-Path")
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		r.errMsg = string(b)
		return r
	}
	events := 0
	if cancelAfter == 0 {
		cancel()
		return r
	}
	done, err := eachSSE(resp.Body, func(data string) bool {
		var ev sseChunk
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			r.errMsg = "undecodable event: " + err.Error()
			return true
		}
		if ev.Tandem != nil {
			r.path, r.reason = ev.Tandem.PrefillPath, ev.Tandem.PrefillReason
		}
		for _, c := range ev.Choices {
			if c.FinishReason != nil && *c.FinishReason != "" {
				r.finish = *c.FinishReason
			}
		}
		if ev.Usage != nil {
			r.completion = ev.Usage.CompletionTokens
		}
		if ev.Error != nil {
			r.errMsg = "error event: " + ev.Error.Message
		}
		if events++; events == cancelAfter {
			cancel()
			return false
		}
		return true
	})
	r.sawDone = done
	if err != nil {
		r.err = err
	}
	return r
}

// check returns what is wrong with a stream that was not cancelled, or "".
func (r soakResult) check(maxTokens int) string {
	switch {
	case r.err != nil && r.status == 0:
		return "request failed: " + soaktest.Trim(r.err.Error())
	case r.status != http.StatusOK:
		return fmt.Sprintf("status %d: %s", r.status, soaktest.Trim(r.errMsg))
	case r.errMsg != "":
		return soaktest.Trim(r.errMsg)
	case r.err != nil:
		return "stream broken: " + soaktest.Trim(r.err.Error())
	case !r.sawDone:
		return "stream ended without [DONE]"
	case r.finish != "length" && r.finish != "stop":
		return fmt.Sprintf("finish_reason %q", r.finish)
	case r.completion < 1 || r.completion > maxTokens || (r.finish == "length" && r.completion != maxTokens):
		return fmt.Sprintf("usage.completion_tokens %d with finish_reason %s and max_tokens N", r.completion, r.finish)
	case r.path != "local" && r.path != "remote" && r.path != "fallback":
		return fmt.Sprintf("prefill path %q", r.path)
	case r.header != r.path:
		return fmt.Sprintf("x-tandem-prefill-path %q but the stream says %q", r.header, r.path)
	}
	return ""
}
