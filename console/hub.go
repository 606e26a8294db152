package console

import (
	"encoding/json"
	"errors"
	"fmt"
)

// subBuffer is how many events a subscriber may fall behind by. A browser that
// falls further (a sleeping laptop, a stalled connection) is disconnected rather
// than allowed to hold memory; it reconnects and starts from a fresh snapshot.
const subBuffer = 256

// subscriber is one client of the events endpoint.
type subscriber struct {
	ch chan []byte
}

var errClosed = errors.New("console: shutting down")

// frame is one server-sent event. Every message is one of this package's own
// types, which marshal unless a number is not finite; such an event is replaced by
// an "error" event rather than lost silently or allowed to crash a request.
func frame(event string, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(struct {
			Event string `json:"event"`
			Error string `json:"error"`
		}{event, err.Error()})
		event = "error"
	}
	return fmt.Appendf(nil, "event: %s\ndata: %s\n\n", event, b)
}

// subscribe registers a subscriber and returns it with the events that bring it
// up to date: hello, the fleet, the history. Both happen under one lock, so no
// live event can come before them or be missed between them.
func (c *Console) subscribe() (*subscriber, [][]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, nil, errClosed
	}
	s := &subscriber{ch: make(chan []byte, subBuffer)}
	c.subs[s] = struct{}{}
	hello := c.hello
	hello.Model = c.opts.Model()
	first := [][]byte{
		[]byte("retry: 2000\n\n"),
		frame("hello", hello),
		frame("fleet", c.fleet),
		frame("history", c.stats.history()),
	}
	return s, first, nil
}

// unsubscribe forgets s; its channel is closed if it was not already.
func (c *Console) unsubscribe(s *subscriber) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.subs[s]; ok {
		delete(c.subs, s)
		close(s.ch)
	}
}

// publish sends one event to every subscriber; c.mu is held. It never blocks:
// a subscriber whose buffer is full is dropped.
func (c *Console) publish(b []byte) {
	for s := range c.subs {
		select {
		case s.ch <- b:
		default:
			c.log.Info("console: dropping an events client that fell behind; it will reconnect", "buffered", subBuffer)
			delete(c.subs, s)
			close(s.ch)
		}
	}
}

// Subscribers is how many clients the events endpoint serves now.
func (c *Console) Subscribers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.subs)
}

// Close disconnects every subscriber and refuses new ones: the events endpoint's
// streams never end on their own, and must not hold a graceful shutdown.
func (c *Console) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for s := range c.subs {
		delete(c.subs, s)
		close(s.ch)
	}
}
