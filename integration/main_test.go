// Package integration starts the real tandem binary and talks to it over real
// sockets, as a user would.
package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var tandemBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tandem-integration")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tandemBin = filepath.Join(dir, "tandem")
	build := exec.Command("go", "build", "-o", tandemBin, "../cmd/tandem")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build tandem:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running tandem process.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr strings.Builder
	done   chan error
	// routerAddr is the router's address, from the line tandem up prints after ready.
	routerAddr chan string
}

// startUp runs `tandem up` with args on the suite's fixture model and waits for
// its "ready: URL" line.
func startUp(t *testing.T, args ...string) (*proc, string) {
	t.Helper()
	return startUpWith(t, []string{fixtureModel}, args...)
}

// startUpWith is startUp with env added to the environment instead of the fixture.
func startUpWith(t *testing.T, env []string, args ...string) (*proc, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, tandemBin, append([]string{"up", "--http-addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(append(os.Environ(), "TANDEM_LOG_LEVEL=warn"), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan error, 1), routerAddr: make(chan string, 1)}
	cmd.Stderr = writerFunc(func(b []byte) (int, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.stderr.Write(b)
	})
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if url, ok := strings.CutPrefix(sc.Text(), "ready: "); ok {
				ready <- url
			}
			if rest, ok := strings.CutPrefix(sc.Text(), "router "); ok {
				addr, _, _ := strings.Cut(rest, ",")
				select {
				case p.routerAddr <- addr:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			t.Logf("tandem stderr:\n%s", p.logs())
		}
	})
	select {
	case url := <-ready:
		return p, url
	case err := <-p.done:
		p.done <- err // for the cleanup
		t.Fatalf("tandem up exited before ready: %v\n%s", err, p.logs())
	case <-time.After(2 * time.Minute):
		t.Fatalf("tandem up not ready after 2 minutes\n%s", p.logs())
	}
	return nil, ""
}

func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// stop sends SIGINT and returns the exit error, failing if it takes over a minute.
func (p *proc) stop(t *testing.T) error {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(time.Minute):
		t.Fatalf("tandem did not exit within a minute of SIGINT")
	}
	return nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
