package process

import (
	"log/slog"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
)

// The KV transfer port's default is the main port + 1, so that it can be written
// into firewall rules ahead; a free port when the main one is picked freely; none
// when turned off.
func TestKVPortDefault(t *testing.T) {
	env, err := NewEnv(slog.New(slog.DiscardHandler), Serve{}.TLS, nil)
	if err != nil {
		t.Fatal(err)
	}
	noop := func(grpc.ServiceRegistrar) {}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	main := ln.Addr().(*net.TCPAddr).Port
	kv, err := env.NewKVPort(Serve{Listen: ln.Addr().String()}, "", noop)
	if err != nil {
		if strings.Contains(err.Error(), "address already in use") {
			t.Skipf("port %d, after the main one, is taken on this machine", main+1)
		}
		t.Fatal(err)
	}
	ln.Close()
	if kv.Port() != main+1 {
		t.Errorf("KV port %d with --listen on %d, want %d", kv.Port(), main, main+1)
	}
	kv.Close()

	kv, err = env.NewKVPort(Serve{Listen: "127.0.0.1:0"}, "", noop)
	if err != nil {
		t.Fatal(err)
	}
	if kv.Port() == 0 {
		t.Error("KV port 0 with --listen on a free port; want a free port of its own")
	}
	kv.Close()

	if kv, err := env.NewKVPort(Serve{Listen: "127.0.0.1:0"}, KVListenOff, noop); kv != nil || err != nil {
		t.Errorf("--kv-listen off: %v, %v; want no port", kv, err)
	}
}
