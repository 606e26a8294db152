package openaihttp

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
)

// client speaks an engine server's HTTP API.
type client struct {
	base string // "http://host:port", no trailing slash
	http *http.Client
}

// maxBody bounds a non-streamed response and one stream event: an engine that
// sends more is broken, and must not exhaust this worker's memory.
const maxBody = 16 << 20

// StatusError is an engine's non-2xx answer.
type StatusError struct {
	Status int
	Body   string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("engine answered HTTP %d: %s", e.Status, e.Body)
}

// ProtocolError is an engine answer tandem cannot read: HTML or garbage where an
// event stream or a completion was expected. The engine (or a proxy in front of
// it) failed, not the client, so callers see it as an internal error (502).
type ProtocolError struct {
	Msg string
}

func (e *ProtocolError) Error() string { return e.Msg }

// isEventStream reports whether a response's Content-Type is a server-sent event
// stream (or unsaid, which some minimal servers leave it).
func isEventStream(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.TrimSpace(strings.ToLower(mt))
	return mt == "" || mt == "text/event-stream"
}

// notAStream reads the start of a 2xx answer that is not an event stream, for
// the error that says what came instead, and closes it.
func notAStream(resp *http.Response) error {
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	err := &ProtocolError{Msg: fmt.Sprintf("answered HTTP %d with Content-Type %q where an event stream was expected: %q",
		resp.StatusCode, resp.Header.Get("Content-Type"), strings.TrimSpace(string(head)))}
	streamEnded(resp.Body, err)
	return err
}

// StreamEnder is a response body that hears how the stream it carried ended,
// before it is closed: the tracing transport's (services/telemetry), whose
// client span then ends OK or with the stream's error, where the HTTP status
// alone says 200 of a stream that broke halfway. err is nil for a stream that
// reached its end (the engine's finish, max_tokens or a stop token).
type StreamEnder interface {
	StreamEnded(err error)
}

// streamEnded tells body how its stream ended, if it wants to know.
func streamEnded(body io.ReadCloser, err error) {
	if e, ok := body.(StreamEnder); ok {
		e.StreamEnded(err)
	}
}

// post sends body as JSON to path with the request id both legs of a
// disaggregated request share, and returns the response when it is 2xx.
func (c *client) post(ctx context.Context, path, reqID string, body any) (*http.Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if reqID != "" {
		req.Header.Set("X-Request-Id", reqID)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, &StatusError{Status: resp.StatusCode, Body: strings.TrimSpace(string(msg))}
	}
	return resp, nil
}

// complete posts a non-streamed completion and decodes the answer.
func (c *client) complete(ctx context.Context, reqID string, body *CompletionRequest) (*CompletionResponse, error) {
	raw, err := c.postWhole(ctx, reqID, body)
	if err != nil {
		return nil, err
	}
	return ParseCompletion(raw)
}

// postWhole posts a non-streamed completion and reads the answer's bytes.
func (c *client) postWhole(ctx context.Context, reqID string, body *CompletionRequest) ([]byte, error) {
	resp, err := c.post(ctx, "/v1/completions", reqID, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > maxBody {
		return nil, fmt.Errorf("completion response larger than %d bytes", maxBody)
	}
	return raw, nil
}

// ParseCompletion decodes a completions response (or one stream event's data).
func ParseCompletion(raw []byte) (*CompletionResponse, error) {
	var out CompletionResponse
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, &ProtocolError{Msg: fmt.Sprintf("a completion that is not JSON (%v): %q", err, clip(raw, 200))}
	}
	if out.Error != nil {
		return nil, fmt.Errorf("engine error: %s (%s)", out.Error.Message, out.Error.Type)
	}
	return &out, nil
}

// clip is at most n bytes of b, for an error message.
func clip(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// get fetches path's body, at most maxBody bytes.
func (c *client) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, &StatusError{Status: resp.StatusCode, Body: strings.TrimSpace(string(b[:min(len(b), 4096)]))}
	}
	if len(b) > maxBody {
		return nil, fmt.Errorf("GET %s: larger than %d bytes", path, maxBody)
	}
	return b, nil
}

// models lists the served models.
func (c *client) models(ctx context.Context) (ModelList, error) {
	b, err := c.get(ctx, "/v1/models")
	if err != nil {
		return ModelList{}, err
	}
	var l ModelList
	if err := json.Unmarshal(b, &l); err != nil {
		return ModelList{}, fmt.Errorf("/v1/models: %w", err)
	}
	return l, nil
}

// events reads a server-sent event stream's data fields.
type events struct {
	sc *bufio.Scanner
}

func newEvents(r io.Reader) *events {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxBody)
	return &events{sc: sc}
}

// errDone is the "[DONE]" event that ends an OpenAI stream.
var errDone = errors.New("stream done")

// next returns the next event's data; io.EOF when the stream ends without
// "[DONE]", errDone at it. Comments and other fields are ignored, and the lines of
// a multi-line data field are joined with newlines, as the SSE format says.
func (e *events) next() ([]byte, error) {
	var data []byte
	have := false
	for e.sc.Scan() {
		line := e.sc.Bytes()
		if len(line) == 0 {
			if !have {
				continue
			}
			break
		}
		v, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		v = bytes.TrimPrefix(v, []byte(" "))
		if have {
			data = append(data, '\n')
		}
		data = append(data, v...)
		have = true
	}
	if !have {
		if err := e.sc.Err(); err != nil {
			return nil, err
		}
		return nil, io.EOF
	}
	if string(bytes.TrimSpace(data)) == "[DONE]" {
		return nil, errDone
	}
	return data, nil
}
