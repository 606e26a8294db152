package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// healthServer serves grpc.health.v1 on loopback: the server SERVING, service
// "busy" NOT_SERVING.
func healthServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	h.SetServingStatus("busy", healthpb.HealthCheckResponse_NOT_SERVING)
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, h)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

func envOf(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// exitOf is the status main would exit with for err.
func exitOf(err error) int {
	var ec exitCode
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ec):
		return int(ec)
	default:
		return 1
	}
}

// TestHealthExitStatus: compose healthchecks read only the exit status, so it
// must be 0 for SERVING alone, 1 for an answer that is not SERVING, and 2 when
// there is no answer.
func TestHealthExitStatus(t *testing.T) {
	addr := healthServer(t)
	refused := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}()
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want int
		out  string
	}{
		{"serving", []string{addr}, nil, 0, "SERVING"},
		{"not serving", []string{addr, "--service", "busy"}, nil, 1, "NOT_SERVING"},
		{"unknown service", []string{addr, "--service", "nope"}, nil, 2, "NotFound"},
		{"nothing listening", []string{refused, "--timeout", "500ms"}, nil, 2, refused},
		// Every flag reads TANDEM_<FLAG>; a flag on the command line wins.
		{"service from the environment", []string{addr}, map[string]string{"TANDEM_SERVICE": "busy"}, 1, "NOT_SERVING"},
		{"flag beats the environment", []string{addr, "--service", ""}, map[string]string{"TANDEM_SERVICE": "busy"}, 0, "SERVING"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), append([]string{"health"}, c.args...), envOf(c.env), &stdout, &stderr)
			if got := exitOf(err); got != c.want || !strings.Contains(stdout.String(), c.out) {
				t.Errorf("tandem health %v: exit %d, output %q (%v); want exit %d and %q", c.args, got, stdout.String(), err, c.want, c.out)
			}
		})
	}
}

// TestBadEnvironmentNamesTheVariable: a malformed TANDEM_* value is an error that
// says which variable, not a silent default.
func TestBadEnvironmentNamesTheVariable(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"health", healthServer(t)}, envOf(map[string]string{"TANDEM_TIMEOUT": "soon"}), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "TANDEM_TIMEOUT") {
		t.Errorf("TANDEM_TIMEOUT=soon: %v, want an error naming TANDEM_TIMEOUT", err)
	}
	if err := run(context.Background(), []string{"health"}, envOf(nil), &stdout, &stderr); err == nil || !strings.Contains(err.Error(), "address") {
		t.Errorf("tandem health with no address: %v, want an error asking for one", err)
	}
}

// TestHelpIsComplete: the top-level help lists every command, and every
// command's help lists each flag with the environment variable that sets it.
func TestHelpIsComplete(t *testing.T) {
	var top bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, envOf(nil), &top, &top); err != nil && !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("tandem --help: %v", err)
	}
	for _, c := range commands() {
		if !strings.Contains(top.String(), "  "+c.name+" ") {
			t.Errorf("tandem --help does not list %s:\n%s", c.name, top.String())
		}
		if c.name == "version" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(context.Background(), []string{c.name, "--help"}, envOf(nil), &out, &out)
			if !errors.Is(err, flag.ErrHelp) {
				t.Fatalf("tandem %s --help: %v", c.name, err)
			}
			lines := strings.Split(out.String(), "\n")
			flags := 0
			for i, l := range lines {
				name, ok := strings.CutPrefix(l, "  --")
				if !ok {
					continue
				}
				flags++
				name, _, _ = strings.Cut(name, " ")
				want := "env TANDEM_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
				rest := strings.Join(lines[i+1:min(i+4, len(lines))], "\n")
				if !strings.Contains(rest, want) {
					t.Errorf("tandem %s --help: --%s does not say %q:\n%s", c.name, name, want, strings.Join(lines[i:min(i+4, len(lines))], "\n"))
				}
			}
			if flags == 0 {
				t.Errorf("tandem %s --help lists no flags:\n%s", c.name, out.String())
			}
		})
	}
}
