package rpc

import (
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
)

// Conns keeps one client connection per address, dialled the first time it is
// asked for, for a process that calls workers by the address discovery or the
// router gave it.
type Conns struct {
	dial Dialer
	// live, if set, lists the addresses still worth a connection: dialling a new
	// address is the moment to close the others'.
	live func() []string
	// idle, when set, is how long a connection may carry no call before its TCP
	// connection is closed (gRPC's idle mode: the next call reconnects), and
	// forget how long an address may go unasked before it is dropped.
	idle, forget time.Duration

	mu       sync.Mutex
	conns    map[string]*conn
	lastScan time.Time
}

type conn struct {
	cc   *grpc.ClientConn
	used time.Time
}

// Dialer opens a client connection to addr with the usual options and opts
// (Clients.DialWith).
type Dialer func(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error)

// NewConns returns a cache that dials with dial. live may be nil: then no
// connection is closed before Close.
func NewConns(dial Dialer, live func() []string) *Conns {
	return &Conns{dial: dial, live: live, conns: map[string]*conn{}}
}

// NewPeerConns returns the cache a process shares among its services for the
// peers they call now and then (a decode worker's prefill workers): a connection
// is dialled on first use, its TCP connection closed after idle without a call
// and reopened by the next one, and an address not asked for in 10 idle periods
// is forgotten. So a process holds sockets only to the peers it is using, not to
// every peer it knows. Reconnection backs off to at most 5s, not gRPC's 2
// minutes, so that a peer that starts late is reached soon after it listens.
func NewPeerConns(dial Dialer, idle time.Duration) *Conns {
	return &Conns{dial: dial, idle: idle, forget: 10 * idle, conns: map[string]*conn{}}
}

// Get returns the connection to addr, dialling it with opts the first time. With
// live set, a new address closes the connections to addresses live no longer
// lists (workers that left, or came back on another port).
func (c *Conns) Get(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.conns[addr]; ok {
		e.used = now
		return e.cc, nil
	}
	if c.idle > 0 {
		bo := backoff.DefaultConfig
		bo.MaxDelay = 5 * time.Second
		opts = append(opts, grpc.WithIdleTimeout(c.idle), grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: 5 * time.Second}))
	}
	cc, err := c.dial(addr, opts...)
	if err != nil {
		return nil, err
	}
	c.conns[addr] = &conn{cc: cc, used: now}
	c.prune(addr, now)
	return cc, nil
}

// prune closes what is no longer worth keeping, when a new address was dialled.
func (c *Conns) prune(added string, now time.Time) {
	if c.forget > 0 && now.Sub(c.lastScan) >= c.idle {
		c.lastScan = now
		for a, e := range c.conns {
			// An idle connection has no call in flight: gRPC left idle mode for none.
			if a != added && now.Sub(e.used) > c.forget && e.cc.GetState() == connectivity.Idle {
				_ = e.cc.Close()
				delete(c.conns, a)
			}
		}
	}
	if c.live == nil {
		return
	}
	keep := map[string]bool{added: true}
	for _, a := range c.live() {
		keep[a] = true
	}
	for a, e := range c.conns {
		if !keep[a] {
			_ = e.cc.Close()
			delete(c.conns, a)
		}
	}
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

// Open counts the connections that hold a TCP connection now (or are opening
// one), as opposed to those idle or failed.
func (c *Conns) Open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, e := range c.conns {
		switch e.cc.GetState() {
		case connectivity.Ready, connectivity.Connecting:
			n++
		}
	}
	return n
}

// Close closes every connection.
func (c *Conns) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for a, e := range c.conns {
		_ = e.cc.Close()
		delete(c.conns, a)
	}
}
