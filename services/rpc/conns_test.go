package rpc_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tandem-serve/tandem/internal/testutil"
	"github.com/tandem-serve/tandem/services/rpc"
)

func healthServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

// Peer connections hold a socket only while they are used: after the idle time
// without a call the TCP connection is closed, the next call opens one again,
// and an address unused for long is forgotten.
func TestPeerConnsCloseWhenIdle(t *testing.T) {
	a, b := healthServer(t), healthServer(t)
	dial := func(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
		return grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	}
	c := rpc.NewPeerConns(dial, 100*time.Millisecond)
	t.Cleanup(c.Close)
	call := func(addr string) *grpc.ClientConn {
		t.Helper()
		cc, err := c.Get(addr)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("Check on %s: %v", addr, err)
		}
		return cc
	}
	cc := call(a)
	if n := c.Open(); n != 1 {
		t.Fatalf("%d connections open after a call, want 1", n)
	}
	testutil.WaitFor(t, "the idle connection closed its socket", func() bool { return cc.GetState() == connectivity.Idle && c.Open() == 0 })
	if again := call(a); again != cc {
		t.Error("a second Get dialled again instead of reusing the cached connection")
	}
	// Unused for ten idle periods, a is forgotten the next time another address is
	// dialled.
	testutil.WaitFor(t, "a idle again", func() bool { return cc.GetState() == connectivity.Idle })
	time.Sleep(time.Second + 100*time.Millisecond)
	call(b)
	if addrs := c.Addrs(); len(addrs) != 1 || addrs[0] != b {
		t.Errorf("addresses cached %v, want only %s", addrs, b)
	}
	if cc.GetState() != connectivity.Shutdown {
		t.Errorf("the forgotten connection is %v, want closed", cc.GetState())
	}
}
