package frontend

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"connectrpc.com/connect"
)

// A client that sends its body a byte at a time would hold a connection (and a
// goroutine) for as long as it likes: the server's header timeout does not cover
// the body. The body must arrive within BodyReadTimeout plus the time its length
// takes at BodyMinRate; an unknown length (chunked) earns time as its bytes arrive.

// deadlineBody sets the connection's read deadline as the body is read.
type deadlineBody struct {
	body    io.ReadCloser
	ctl     *http.ResponseController
	start   time.Time
	timeout time.Duration
	rate    int64 // bytes per second; 0 means no allowance for length
	length  int64 // Content-Length, or -1
	read    int64
	// timedOut records that a read failed at the deadline.
	timedOut bool
}

// limitBodyTime wraps r.Body so that reading it stops at the deadline; it returns
// nil, leaving the body alone, when the bound is off or the connection cannot take
// a read deadline (a ResponseWriter wrapped without Unwrap).
func (f *Frontend) limitBodyTime(w http.ResponseWriter, r *http.Request) *deadlineBody {
	if f.cfg.BodyReadTimeout <= 0 {
		return nil
	}
	d := &deadlineBody{body: r.Body, ctl: http.NewResponseController(w), start: time.Now(),
		timeout: f.cfg.BodyReadTimeout, rate: f.cfg.BodyMinRate, length: r.ContentLength}
	if err := d.ctl.SetReadDeadline(d.deadline(max(d.length, 0))); err != nil {
		return nil
	}
	r.Body = d
	return d
}

// deadline is when a body of n bytes must have arrived.
func (d *deadlineBody) deadline(n int64) time.Time {
	allow := d.timeout
	if d.rate > 0 {
		allow += time.Duration(float64(n) / float64(d.rate) * float64(time.Second))
	}
	return d.start.Add(allow)
}

func (d *deadlineBody) Read(p []byte) (int, error) {
	n, err := d.body.Read(p)
	d.read += int64(n)
	if d.length < 0 && n > 0 {
		// Chunked: the time allowed grows with what has arrived, at the minimum rate.
		_ = d.ctl.SetReadDeadline(d.deadline(d.read))
	}
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		d.timedOut = true
	}
	return n, err
}

func (d *deadlineBody) Close() error { return d.body.Close() }

// done lifts the deadline once the body is read, so that it does not cut a long
// stream's later reads (the server's own background read looks for the client
// going away).
func (d *deadlineBody) done() {
	_ = d.ctl.SetReadDeadline(time.Time{})
}

// bodyTimeoutError is the 408 for a body that did not arrive in time; the
// connection is closed after it, since the rest of the body is still on its way.
func (f *Frontend) bodyTimeoutError(w http.ResponseWriter, d *deadlineBody) error {
	f.metrics.bodyTimeouts.Inc()
	w.Header().Set("Connection", "close")
	msg := fmt.Sprintf("the request body did not arrive in time: %d bytes in %s", d.read, time.Since(d.start).Round(time.Millisecond))
	if d.length >= 0 {
		msg += fmt.Sprintf(" of %d", d.length)
	}
	return &apiError{code: connect.CodeDeadlineExceeded, status: http.StatusRequestTimeout, oaiCode: "request_timeout",
		msg: msg + fmt.Sprintf("; a body must arrive within %s plus its length at %d bytes/s", d.timeout, d.rate)}
}
