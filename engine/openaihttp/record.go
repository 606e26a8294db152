package openaihttp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// RecordVersion is the version of the capture format Recorder writes; a reader
// refuses lines of another.
const RecordVersion = 1

// Exchange is one line of a capture (JSON lines): an HTTP exchange with the
// engine server, or one message from its KV event sockets.
type Exchange struct {
	V int `json:"v"`
	// Seq orders exchanges by when they started; At is then, in seconds since
	// the recorder started.
	Seq  int           `json:"seq"`
	At   float64       `json:"at"`
	HTTP *HTTPExchange `json:"http,omitempty"`
	ZMQ  *ZMQMessage   `json:"zmq,omitempty"`
}

// HTTPExchange is one request and its response. A JSON body is kept as JSON
// (Body), any other as text (Text). Times are seconds after the request was
// sent.
type HTTPExchange struct {
	Method string `json:"method"`
	Path   string `json:"path"` // with the query, if any
	// Header holds the headers that say something of the exchange
	// (recordedHeaders); credentials are never recorded.
	Header map[string]string `json:"header,omitempty"`
	Body   json.RawMessage   `json:"body,omitempty"`
	Text   string            `json:"text,omitempty"`

	Status         int               `json:"status"`
	ResponseHeader map[string]string `json:"response_header,omitempty"`
	HeaderAfter    float64           `json:"header_after"`
	ResponseBody   json.RawMessage   `json:"response_body,omitempty"`
	ResponseText   string            `json:"response_text,omitempty"`
	// Chunks are a streamed (text/event-stream) body as it was read.
	Chunks []Chunk `json:"chunks,omitempty"`
	// Took is when the body ended (or the exchange failed).
	Took float64 `json:"took"`
	// Error is the transport's error, or the body's, or "closed" for a body the
	// client closed before its end (a cancelled stream).
	Error string `json:"error,omitempty"`
}

// Chunk is one read of a streamed body.
type Chunk struct {
	After float64 `json:"after"`
	Data  string  `json:"data"`
}

// ZMQMessage is one multipart message from the KV event publisher (live) or its
// replay socket, frames verbatim (base64 in JSON).
type ZMQMessage struct {
	Replay bool     `json:"replay"`
	Frames [][]byte `json:"frames"`
}

// recordedHeaders are kept; the rest (dates, lengths, connection management)
// say nothing a replay needs.
var recordedHeaders = []string{"Content-Type", "Accept", "X-Request-Id", "Retry-After"}

// maxRecorded bounds one recorded body, as maxBody bounds what is read.
const maxRecorded = maxBody

// Recorder writes every exchange it carries to a capture file: an
// http.RoundTripper for Config.HTTP, and OnFrames for the KV event subscriber.
type Recorder struct {
	next  http.RoundTripper
	start time.Time
	path  string

	mu     sync.Mutex
	f      *os.File
	seq    int
	err    error // the first write error, reported by Close
	closed bool
}

// recorders numbers this process's recorders.
var recorders atomic.Int64

// NewRecorder creates dir if needed and a capture file in it named by the time,
// the process id and a count, and records the exchanges next carries (nil: a transport with
// New's default settings).
func NewRecorder(dir string, next http.RoundTripper) (*Recorder, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("engine record directory: %w", err)
	}
	start := time.Now()
	// Several workers of one process (tandem up) may record into one directory.
	path := filepath.Join(dir, fmt.Sprintf("engine-%s-%d-%d.jsonl", start.UTC().Format("20060102T150405.000"), os.Getpid(), recorders.Add(1)))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("engine record file: %w", err)
	}
	if next == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost, t.ResponseHeaderTimeout = 256, 10*time.Minute
		next = t
	}
	return &Recorder{next: next, start: start, path: path, f: f}, nil
}

// Path is the capture file's.
func (r *Recorder) Path() string { return r.path }

// Close closes the capture file; exchanges that end later are not written.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return r.err
	}
	r.closed = true
	if err := r.f.Close(); err != nil && r.err == nil {
		r.err = err
	}
	return r.err
}

func (r *Recorder) since(t time.Time) float64 { return t.Sub(r.start).Seconds() }

func (r *Recorder) next0() (int, float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	return r.seq, r.since(time.Now())
}

func (r *Recorder) write(x Exchange) {
	x.V = RecordVersion
	line, err := json.Marshal(x)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if err == nil {
		_, err = r.f.Write(append(line, '\n'))
	}
	if err != nil && r.err == nil {
		r.err = err
	}
}

// OnFrames records one message from the KV event publisher, or from its replay
// socket when replay is set.
func (r *Recorder) OnFrames(replay bool, frames [][]byte) {
	seq, at := r.next0()
	cp := make([][]byte, len(frames))
	for i, f := range frames {
		cp[i] = bytes.Clone(f)
	}
	r.write(Exchange{Seq: seq, At: at, ZMQ: &ZMQMessage{Replay: replay, Frames: cp}})
}

// RoundTrip sends req through the wrapped transport and records the exchange
// once its response body has been read to its end, or closed.
func (r *Recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	seq, at := r.next0()
	sent := time.Now()
	h := &HTTPExchange{Method: req.Method, Path: req.URL.RequestURI(), Header: headers(req.Header)}
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		h.Body, h.Text = bodyOf(b)
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	x := Exchange{Seq: seq, At: at, HTTP: h}
	resp, err := r.next.RoundTrip(req)
	h.HeaderAfter = time.Since(sent).Seconds()
	if err != nil {
		h.Took, h.Error = h.HeaderAfter, err.Error()
		r.write(x)
		return nil, err
	}
	h.Status, h.ResponseHeader = resp.StatusCode, headers(resp.Header)
	resp.Body = &recordedBody{rc: resp.Body, r: r, x: x, sent: sent,
		stream: strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")}
	return resp, nil
}

func headers(h http.Header) map[string]string {
	out := map[string]string{}
	for _, k := range recordedHeaders {
		if v := h.Get(k); v != "" {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// bodyOf keeps a JSON body as JSON, compacted, and any other as text.
func bodyOf(b []byte) (json.RawMessage, string) {
	if len(b) == 0 {
		return nil, ""
	}
	if json.Valid(b) {
		var c bytes.Buffer
		if json.Compact(&c, b) == nil {
			return c.Bytes(), ""
		}
	}
	return nil, string(b)
}

// recordedBody records a response body as the client reads it.
type recordedBody struct {
	rc     io.ReadCloser
	r      *Recorder
	x      Exchange
	sent   time.Time
	stream bool
	buf    bytes.Buffer
	size   int
	once   sync.Once
}

func (b *recordedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 && b.size+n <= maxRecorded {
		b.size += n
		if b.stream {
			b.x.HTTP.Chunks = append(b.x.HTTP.Chunks, Chunk{After: time.Since(b.sent).Seconds(), Data: string(p[:n])})
		} else {
			b.buf.Write(p[:n])
		}
	}
	if err == io.EOF {
		b.finish("")
	} else if err != nil {
		b.finish(err.Error())
	}
	return n, err
}

func (b *recordedBody) Close() error {
	b.finish("closed")
	return b.rc.Close()
}

func (b *recordedBody) finish(errText string) {
	b.once.Do(func() {
		h := b.x.HTTP
		h.Took, h.Error = time.Since(b.sent).Seconds(), errText
		if !b.stream {
			h.ResponseBody, h.ResponseText = bodyOf(b.buf.Bytes())
		}
		b.r.write(b.x)
	})
}
