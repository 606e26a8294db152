package integration

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// faultProxy forwards TCP to a target and can be told to delay every piece of
// data, or to black-hole it (a partition: connections stay open, nothing passes),
// or to cut every connection or hold back what the target sends the moment one
// HTTP/2 stream from the target has carried a given number of DATA bytes (see
// tripAfterStreamData).
type faultProxy struct {
	ln        net.Listener
	target    string
	delay     atomic.Int64 // nanoseconds
	blackhole atomic.Bool
	mu        sync.Mutex
	conns     []net.Conn
	closed    atomic.Bool
	// Under mu: what tripAfterStreamData armed, and what it did.
	tripAt  int
	tripCut bool
	onTrip  func()
	cut     bool // every connection was closed: pass nothing more
	held    bool // hold back what the target sends
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, target: target}
	t.Cleanup(func() {
		p.closed.Store(true)
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	go p.serve()
	return p
}

func (p *faultProxy) Addr() string { return p.ln.Addr().String() }

// tripAfterStreamData arms the proxy: the first time an HTTP/2 stream the target
// sends (an h2c server: the KV transfer port) carries data that takes it to n
// DATA payload bytes passed on to the client, the proxy calls onTrip and then,
// with cut, closes every connection it holds and passes nothing more, as the
// network does when the target's host dies; without cut, it holds back
// everything the target sends from then on, while what the client sends (a
// cancel, a window update) still passes, until release. This happens before
// another byte is forwarded, and the proxy forwards at most 32 KiB at a time, so
// no stream that was carrying data had passed n+32 KiB: a stream longer than
// that is caught in the middle, whatever the timing of the processes at either
// end.
func (p *faultProxy) tripAfterStreamData(n int, cut bool, onTrip func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tripAt, p.tripCut, p.onTrip = n, cut, onTrip
}

// release disarms the proxy and passes on what it held back.
func (p *faultProxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tripAt, p.held = 0, false
}

func (p *faultProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			s.Close()
			continue
		}
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go p.pipe(c, s, &h2Tap{streams: map[uint32]int{}})
		go p.pipe(s, c, nil)
	}
}

// pipe copies src to dst. tap, on the target-to-client direction, follows the
// HTTP/2 frames passed on, for tripAfterStreamData.
func (p *faultProxy) pipe(dst, src net.Conn, tap *h2Tap) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			for p.blackhole.Load() {
				time.Sleep(10 * time.Millisecond)
			}
			if d := time.Duration(p.delay.Load()); d > 0 {
				time.Sleep(d)
			}
			for {
				pass, held := p.forward(dst, buf[:n], tap)
				if !held {
					if !pass {
						return
					}
					break
				}
				if p.closed.Load() {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

// forward writes b to dst unless the proxy has been cut, or is holding back what
// the target sends (held: try again later), then trips the proxy if b took a
// stream past the armed threshold. pass reports whether to go on.
func (p *faultProxy) forward(dst net.Conn, b []byte, tap *h2Tap) (pass, held bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.cut:
		return false, false
	case p.held && tap != nil:
		return false, true
	}
	if _, err := dst.Write(b); err != nil {
		return false, false
	}
	if tap == nil {
		return true, false
	}
	if most := tap.feed(b); p.tripAt > 0 && most >= p.tripAt {
		p.tripAt = 0
		if p.onTrip != nil {
			p.onTrip()
		}
		if p.tripCut {
			p.cut = true
			for _, c := range p.conns {
				c.Close()
			}
			return false, false
		}
		p.held = true
	}
	return true, false
}

// h2Tap follows the frames of one direction of an HTTP/2 connection as its bytes
// pass, counting each stream's DATA payload bytes. It is fed from the first byte
// of the direction: a server's, which has no preface before its frames.
type h2Tap struct {
	hdr     []byte // the part of the next frame header seen so far
	left    int    // payload bytes of the current frame still to come
	data    bool   // the current frame is DATA
	stream  uint32
	streams map[uint32]int // DATA payload bytes so far, by stream
}

// feed consumes b and returns the most DATA bytes carried so far by any stream
// that b carried DATA of.
func (t *h2Tap) feed(b []byte) int {
	most := 0
	for len(b) > 0 {
		if t.left == 0 {
			k := min(9-len(t.hdr), len(b))
			t.hdr, b = append(t.hdr, b[:k]...), b[k:]
			if len(t.hdr) < 9 {
				break
			}
			t.left = int(t.hdr[0])<<16 | int(t.hdr[1])<<8 | int(t.hdr[2])
			t.data = t.hdr[3] == 0 // DATA; grpc-go sends no padding
			t.stream = binary.BigEndian.Uint32(t.hdr[5:9]) & 0x7fffffff
			t.hdr = t.hdr[:0]
			continue
		}
		k := min(t.left, len(b))
		if t.data {
			t.streams[t.stream] += k
			most = max(most, t.streams[t.stream])
		}
		t.left, b = t.left-k, b[k:]
	}
	return most
}
