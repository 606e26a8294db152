// The multi-host fault tests' load: streamed chats through the official OpenAI
// SDK, a third of them long prompts (prefilled remotely), a quarter long answers,
// a fifth cancelled by the client after a few chunks; every request's outcome kept
// with its times.

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tandem-serve/tandem/internal/testutil/soaktest"
)

// mhHangLimit is how long a request may take before it counts as hung: the
// model is tiny, so a healthy one takes well under a second.
const mhHangLimit = 45 * time.Second

// mhRequest is one request of the load as its client saw it.
type mhRequest struct {
	start, end   time.Time
	long, cancel bool
	maxTokens    int
	worker, path string // the tandem extension's decode worker and prefill path
	kind         string // ok, cancelled, or what went wrong
}

func (r mhRequest) failed() bool { return r.kind != "ok" && r.kind != "cancelled" }

type mhLoad struct {
	client   openai.Client
	stop     context.CancelFunc
	wg       sync.WaitGroup
	mu       sync.Mutex
	done     []mhRequest
	inflight map[int]*mhRequest
	next     int
}

// startLoad runs clients concurrent streams against the OpenAI API at url until
// Stop.
func startLoad(url string, clients int) *mhLoad {
	ctx, stop := context.WithCancel(context.Background())
	l := &mhLoad{stop: stop, inflight: map[int]*mhRequest{},
		client: openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))}
	for range clients {
		l.wg.Go(func() {
			for ctx.Err() == nil {
				l.one(ctx)
			}
		})
	}
	return l
}

func (l *mhLoad) one(parent context.Context) {
	l.mu.Lock()
	n := l.next
	l.next++
	// One in four answers is long (300 tokens, seconds of streaming), so that a
	// fault finds streams under way.
	r := &mhRequest{start: time.Now(), long: n%3 == 0, cancel: n%5 == 1, maxTokens: 24}
	if n%4 == 2 && !r.long {
		r.maxTokens = 300
	}
	l.inflight[n] = r
	l.mu.Unlock()

	content := fmt.Sprintf("Request %d: tell me a story about a fox.", n)
	if r.long {
		content = longPrompt(n, 240)
	}
	ctx, cancel := context.WithTimeout(context.Background(), mhHangLimit)
	defer cancel()
	stream := l.client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:         "stories260K",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(content)},
		MaxTokens:     openai.Int(int64(r.maxTokens)),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	chunks, finish, errEvent := 0, "", ""
	for stream.Next() {
		var ext sseChunk
		if err := json.Unmarshal([]byte(stream.Current().RawJSON()), &ext); err == nil {
			if ext.Tandem != nil && ext.Tandem.DecodeWorker != "" {
				l.mu.Lock()
				r.worker, r.path = ext.Tandem.DecodeWorker, ext.Tandem.PrefillPath
				l.mu.Unlock()
			}
			if ext.Error != nil {
				errEvent = ext.Error.Message
			}
		}
		for _, ch := range stream.Current().Choices {
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
			if ch.Delta.Content != "" {
				chunks++
			}
		}
		if r.cancel && chunks == 3 {
			cancel()
			break
		}
	}
	err := stream.Err()
	_ = stream.Close()
	var apiErr *openai.Error
	switch {
	case r.cancel && chunks >= 3:
		r.kind = "cancelled"
	case errors.As(err, &apiErr):
		r.kind = fmt.Sprintf("HTTP %d %s", apiErr.StatusCode, apiErr.Type)
	case errEvent != "":
		r.kind = "error event: " + errorClass(errEvent)
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil && parent.Err() == nil:
		r.kind = "hung (no end in 45s)"
	case err != nil:
		r.kind = "stream broken: " + errorClass(fmt.Sprint(err))
	case finish != "length" && finish != "stop":
		r.kind = fmt.Sprintf("no finish_reason (%q)", finish)
	default:
		r.kind = "ok"
	}
	if parent.Err() != nil && r.kind != "ok" && r.kind != "cancelled" {
		return // stopped by Stop mid-request: not the deployment's doing
	}
	r.end = time.Now()
	l.mu.Lock()
	delete(l.inflight, n)
	l.done = append(l.done, *r)
	l.mu.Unlock()
}

// errorClass keeps an error message's gist (its first clause) so that errors of
// one kind are counted together.
func errorClass(msg string) string {
	msg = soaktest.Trim(msg)
	if i := strings.IndexAny(msg, ":("); i > 0 {
		msg = msg[:i]
	}
	return strings.TrimSpace(msg)
}

// inflightOn is how many requests are streaming from worker now.
func (l *mhLoad) inflightOn(worker string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.inflight {
		if r.worker == worker {
			n++
		}
	}
	return n
}

// inflightLongOn is how many long answers are streaming from worker now.
func (l *mhLoad) inflightLongOn(worker string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.inflight {
		if r.worker == worker && r.maxTokens > 24 {
			n++
		}
	}
	return n
}

// unfinished lists the requests started before t that have not ended.
func (l *mhLoad) unfinished(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.inflight {
		if r.start.Before(t) {
			n++
		}
	}
	return n
}

// between returns the finished requests that started in [from, to).
func (l *mhLoad) between(from, to time.Time) []mhRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []mhRequest
	for _, r := range l.done {
		if !r.start.Before(from) && r.start.Before(to) {
			out = append(out, r)
		}
	}
	return out
}

// touching returns the finished requests that were running at some moment in
// [from, to).
func (l *mhLoad) touching(from, to time.Time) []mhRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []mhRequest
	for _, r := range l.done {
		if r.start.Before(to) && !r.end.Before(from) {
			out = append(out, r)
		}
	}
	return out
}

// Stop ends the load, letting the requests under way finish.
func (l *mhLoad) Stop() []mhRequest {
	l.stop()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.done)
}

// tally is a window's figures: requests, and errors by kind.
type tally struct {
	requests, cancelled, failed int
	kinds                       map[string]int
}

func tallyOf(rs []mhRequest) tally {
	t := tally{kinds: map[string]int{}}
	for _, r := range rs {
		t.requests++
		switch {
		case r.kind == "cancelled":
			t.cancelled++
		case r.failed():
			t.failed++
			t.kinds[r.kind]++
		}
	}
	return t
}

func (t tally) String() string {
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(t.kinds)) {
		kinds = append(kinds, fmt.Sprintf("%s ×%d", k, t.kinds[k]))
	}
	if len(kinds) == 0 {
		kinds = []string{"none"}
	}
	return fmt.Sprintf("%d requests (%d cancelled by the client), %d failed: %s", t.requests, t.cancelled, t.failed, strings.Join(kinds, ", "))
}
