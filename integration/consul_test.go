package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/tandem-serve/tandem/internal/testutil"
)

var (
	consulOnce sync.Once
	consulBin  string
	consulErr  error
)

// consulBinary returns the Consul agent that scripts/install-consul.sh installs
// (TANDEM_CONSUL_BIN when the test command already ran it).
func consulBinary(t *testing.T) string {
	t.Helper()
	consulOnce.Do(func() {
		if consulBin = os.Getenv("TANDEM_CONSUL_BIN"); consulBin != "" {
			return
		}
		out, err := exec.Command("../scripts/install-consul.sh").Output()
		if err != nil {
			consulErr = fmt.Errorf("install-consul.sh: %w", err)
			return
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		consulBin = lines[len(lines)-1]
	})
	if consulErr != nil {
		t.Fatal(consulErr)
	}
	return consulBin
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// consulAgent is a dev-mode agent on free loopback ports.
type consulAgent struct {
	t       *testing.T
	bin     string
	dataDir string
	ports   [5]int // http, serf lan, serf wan, server, grpc
	extra   []string
	cmd     *exec.Cmd
	done    chan struct{}
	Addr    string
	API     *api.Client
}

func startConsul(t *testing.T) *consulAgent { t.Helper(); return startConsulWith(t) }

// startConsulWith starts a dev agent with extra command-line arguments.
func startConsulWith(t *testing.T, extra ...string) *consulAgent {
	t.Helper()
	a := &consulAgent{t: t, bin: consulBinary(t), dataDir: t.TempDir(), extra: extra}
	for i := range a.ports {
		a.ports[i] = freePort(t)
	}
	a.Addr = fmt.Sprintf("127.0.0.1:%d", a.ports[0])
	cfg := api.DefaultConfig()
	cfg.Address = a.Addr
	var err error
	if a.API, err = api.NewClient(cfg); err != nil {
		t.Fatal(err)
	}
	a.start()
	t.Cleanup(a.stop)
	return a
}

func (a *consulAgent) start() {
	t := a.t
	a.cmd = exec.Command(a.bin, "agent", "-dev", "-bind", "127.0.0.1", "-client", "127.0.0.1",
		"-node", "tandem-test", "-data-dir", a.dataDir,
		"-http-port", fmt.Sprint(a.ports[0]), "-serf-lan-port", fmt.Sprint(a.ports[1]),
		"-serf-wan-port", fmt.Sprint(a.ports[2]), "-server-port", fmt.Sprint(a.ports[3]),
		"-grpc-port", fmt.Sprint(a.ports[4]), "-grpc-tls-port", "-1", "-dns-port", "-1")
	a.cmd.Args = append(a.cmd.Args, a.extra...)
	logf, err := os.Create(filepath.Join(a.dataDir, fmt.Sprintf("consul-%d.log", time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a.done = make(chan struct{})
	go func() { _ = a.cmd.Wait(); logf.Close(); close(a.done) }()
	testutil.WaitForWithin(t, 30*time.Second, "consul has a leader", func() bool {
		leader, err := a.API.Status().Leader()
		return err == nil && leader != ""
	})
}

func (a *consulAgent) stop() {
	if a.cmd == nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(15 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
	}
	a.cmd = nil
}

func passing(t *testing.T, a *consulAgent, service string) []*api.ServiceEntry {
	t.Helper()
	entries, _, err := a.API.Health().Service(service, "", true, nil)
	if err != nil {
		return nil
	}
	return entries
}

// chat posts a short chat, to whichever model is served, and returns the decode
// worker and prefill path it took.
func chat(t *testing.T, frontend, content string) (decodeWorker, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	body := `{"max_tokens":4,"messages":[{"role":"user","content":"` + content + `"}]}`
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+frontend+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("chat: %v", err)
	}
	defer resp.Body.Close()
	var out struct {
		Tandem struct {
			DecodeWorker string `json:"decode_worker"`
			PrefillPath  string `json:"prefill_path"`
		} `json:"tandem"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("chat: status %d, %v, %+v", resp.StatusCode, err, out.Error)
	}
	return out.Tandem.DecodeWorker, out.Tandem.PrefillPath
}

func fmtSscan(s string, f *float64) (int, error) { return fmt.Sscan(s, f) }
