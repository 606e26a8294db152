package rpc

import (
	"sync"

	"google.golang.org/grpc"
)

// Conns keeps one client connection per address, dialled the first time it is
// asked for, for a process that calls workers by the address discovery or the
// router gave it.
type Conns struct {
	dial Dialer
	// live, if set, lists the addresses still worth a connection: dialling a new
	// address is the moment to close the others'.
	live func() []string

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// Dialer opens a client connection to addr with the usual options and opts
// (Clients.DialWith).
type Dialer func(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error)

// NewConns returns a cache that dials with dial. live may be nil: then no
// connection is closed before Close.
func NewConns(dial Dialer, live func() []string) *Conns {
	return &Conns{dial: dial, live: live, conns: map[string]*grpc.ClientConn{}}
}

// Get returns the connection to addr, dialling it with opts the first time. With
// live set, a new address closes the connections to addresses live no longer
// lists (workers that left, or came back on another port).
func (c *Conns) Get(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	cc, err := c.dial(addr, opts...)
	if err != nil {
		return nil, err
	}
	c.conns[addr] = cc
	if c.live == nil {
		return cc, nil
	}
	keep := map[string]bool{addr: true}
	for _, a := range c.live() {
		keep[a] = true
	}
	for a, old := range c.conns {
		if !keep[a] {
			_ = old.Close()
			delete(c.conns, a)
		}
	}
	return cc, nil
}

// Addrs lists the addresses connected now, in no order.
func (c *Conns) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.conns))
	for a := range c.conns {
		out = append(out, a)
	}
	return out
}

// Close closes every connection.
func (c *Conns) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for a, cc := range c.conns {
		_ = cc.Close()
		delete(c.conns, a)
	}
}
