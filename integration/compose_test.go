package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/tandem-serve/tandem/internal/testutil"
)

// composeProject is the compose project the smoke test runs as; a run first removes
// whatever an earlier, killed run left under this name.
const composeProject = "tandem-smoke"

// A user deploys tandem with compose/build.sh and compose/compose.yaml on a Docker
// engine: every service becomes healthy, a chat streams through the published
// OpenAI API (a long prompt prefilled on the prefill container and handed to the
// decode container), and after scaling decode to two replicas each registers its
// own container address in Consul and both serve requests.
func TestComposeSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("the compose smoke test builds an image and starts containers; skipped with -short")
	}
	c := newComposeRun(t, composeProject, "../compose/compose.yaml")
	buildComposeImage(t)

	c.run(time.Minute, "down", "-v", "--remove-orphans") // leftovers of a killed run
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := c.output(time.Minute, "logs", "--no-color", "--tail", "60")
			t.Logf("compose logs:\n%s", out)
		}
		if out, err := c.output(2*time.Minute, "down", "-v", "--remove-orphans", "--timeout", "20"); err != nil {
			t.Errorf("down -v: %v\n%s", err, out)
		}
	})

	upStart := time.Now()
	c.run(5*time.Minute, "up", "-d")
	want := map[string]int{"consul": 1, "router": 1, "frontend": 1, "prefill": 1, "decode": 1}
	c.waitHealthy(want, 3*time.Minute)
	t.Logf("up until every service was healthy took %s", time.Since(upStart).Round(100*time.Millisecond))

	// A streamed chat through the published port.
	w, path, pieces := c.streamChat(t, "Tell me about disaggregated serving.", 12)
	if pieces < 2 || w == "" || path == "" {
		t.Errorf("streamed chat: %d pieces of text, decode worker %q, prefill path %q; want a streamed answer that names where it ran", pieces, w, path)
	}
	// A prompt longer than the decode worker's threshold crosses containers: the
	// prefill worker computes its KV cache and ships it to the decode worker.
	long := strings.Repeat("The prefill container ships the KV cache to the decode container. ", 20)
	testutil.WaitForWithin(t, time.Minute, "a long prompt is prefilled remotely", func() bool {
		_, path, _ := c.streamChat(t, long, 4)
		return path == "remote"
	})

	scaleStart := time.Now()
	c.run(5*time.Minute, "up", "-d", "--scale", "decode=2")
	want["decode"] = 2
	c.waitHealthy(want, 3*time.Minute)
	t.Logf("scaling decode to 2 until both replicas were healthy took %s", time.Since(scaleStart).Round(100*time.Millisecond))

	// Each replica registered its own container address in Consul.
	decodeIPs := map[string]bool{}
	for _, ct := range c.containers() {
		if ct.service() == "decode" {
			decodeIPs[ct.ip()] = true
		}
	}
	var entries []*api.ServiceEntry
	testutil.WaitForWithin(t, time.Minute, "both decode replicas are passing in Consul", func() bool {
		var err error
		entries, _, err = c.consul.Health().Service("tandem-decode", "", true, nil)
		return err == nil && len(entries) == 2
	})
	var ids []string
	registered := map[string]bool{}
	for _, e := range entries {
		ids = append(ids, e.Service.ID)
		registered[e.Service.Address] = true
		if !decodeIPs[e.Service.Address] || e.Service.Port != 9000 {
			t.Errorf("decode %s registered %s:%d; the decode containers' addresses are %v (port 9000)", e.Service.ID, e.Service.Address, e.Service.Port, decodeIPs)
		}
	}
	if len(registered) != 2 {
		t.Fatalf("the two decode replicas registered addresses %v, want two different ones", registered)
	}

	// Both replicas receive traffic.
	seen := map[string]int{}
	attempt := 0
	testutil.WaitForWithin(t, time.Minute, fmt.Sprintf("both decode replicas %v serve requests", ids), func() bool {
		attempt++
		w, _ := chat(t, c.frontend, fmt.Sprintf("Request %d: which replica answers?", attempt))
		seen[w]++
		return seen[ids[0]] > 0 && seen[ids[1]] > 0
	})
	for w := range seen {
		if !slices.Contains(ids, w) {
			t.Errorf("a request was served by %q, which is not a registered decode replica %v", w, ids)
		}
	}
	t.Logf("scaling decode to 2 until both served took %s (%d requests: %v)", time.Since(scaleStart).Round(100*time.Millisecond), attempt, seen)
}

// buildComposeImage runs compose/build.sh once per test binary: the compose
// tests share its image.
func buildComposeImage(t *testing.T) {
	t.Helper()
	imageOnce.Do(func() {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "../compose/build.sh").CombinedOutput(); err != nil {
			imageErr = fmt.Errorf("compose/build.sh: %v\n%s", err, out)
		}
		t.Logf("compose/build.sh took %s", time.Since(start).Round(100*time.Millisecond))
	})
	if imageErr != nil {
		t.Fatal(imageErr)
	}
}

var (
	imageOnce sync.Once
	imageErr  error
)

// composeRun runs docker compose (v2, or else docker-compose 1.x) on a compose
// file as a project, with the published ports on free loopback ports.
type composeRun struct {
	t        *testing.T
	project  string
	file     string
	cmd      []string // "docker", "compose" or "docker-compose"
	env      []string
	frontend string // host:port of the published OpenAI API
	consul   *api.Client
	// consulAddr is the published Consul agent's host:port.
	consulAddr string
}

// newComposeRun skips the test, saying why, when there is no Docker engine or no
// compose tool.
func newComposeRun(t *testing.T, project, file string) *composeRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("no Docker engine: docker info: %v %s", err, bytes.TrimSpace(out))
	}
	c := &composeRun{t: t, project: project, file: file}
	if exec.CommandContext(ctx, "docker", "compose", "version").Run() == nil {
		c.cmd = []string{"docker", "compose"}
	} else if _, err := exec.LookPath("docker-compose"); err == nil {
		c.cmd = []string{"docker-compose"}
	} else {
		t.Skip("neither docker compose (v2) nor docker-compose is installed")
	}
	httpPort, consulPort := freePort(t), freePort(t)
	c.frontend = fmt.Sprintf("127.0.0.1:%d", httpPort)
	c.env = append(os.Environ(),
		"TANDEM_HTTP_ADDR=127.0.0.1", fmt.Sprintf("TANDEM_HTTP_PORT=%d", httpPort),
		fmt.Sprintf("TANDEM_CONSUL_PORT=%d", consulPort))
	cfg := api.DefaultConfig()
	c.consulAddr = fmt.Sprintf("127.0.0.1:%d", consulPort)
	cfg.Address = c.consulAddr
	var err error
	if c.consul, err = api.NewClient(cfg); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *composeRun) command(ctx context.Context, args ...string) *exec.Cmd {
	full := append(append(slices.Clone(c.cmd[1:]), "-p", c.project, "-f", c.file), args...)
	cmd := exec.CommandContext(ctx, c.cmd[0], full...)
	cmd.Env = c.env
	return cmd
}

// output runs compose with args, bounded by limit.
func (c *composeRun) output(limit time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	return c.command(ctx, args...).CombinedOutput()
}

// run runs compose with args, failing the test if it fails.
func (c *composeRun) run(limit time.Duration, args ...string) {
	c.t.Helper()
	if out, err := c.output(limit, args...); err != nil {
		c.t.Fatalf("%s %s: %v\n%s", strings.Join(c.cmd, " "), strings.Join(args, " "), err, out)
	}
}

// composeContainer is what the smoke test reads of `docker inspect`.
type composeContainer struct {
	Name  string
	State struct {
		Status string
		Health *struct{ Status string }
	}
	Config          struct{ Labels map[string]string }
	NetworkSettings struct {
		Networks map[string]struct{ IPAddress string }
	}
}

func (ct *composeContainer) service() string { return ct.Config.Labels["com.docker.compose.service"] }

func (ct *composeContainer) health() string {
	if ct.State.Health == nil {
		return ct.State.Status + "/no healthcheck"
	}
	return ct.State.Status + "/" + ct.State.Health.Status
}

func (ct *composeContainer) ip() string {
	for _, n := range ct.NetworkSettings.Networks {
		return n.IPAddress
	}
	return ""
}

// containers lists the project's containers, running or not.
func (c *composeRun) containers() []composeContainer {
	c.t.Helper()
	ids, err := exec.Command("docker", "ps", "-aq", "--filter", "label=com.docker.compose.project="+c.project).Output()
	if err != nil {
		c.t.Fatalf("docker ps: %v", err)
	}
	if len(bytes.TrimSpace(ids)) == 0 {
		return nil
	}
	out, err := exec.Command("docker", append([]string{"inspect"}, strings.Fields(string(ids))...)...).Output()
	if err != nil {
		// A container removed between ps and inspect: the next poll sees the change.
		return nil
	}
	var cs []composeContainer
	if err := json.Unmarshal(out, &cs); err != nil {
		c.t.Fatalf("docker inspect: %v", err)
	}
	return cs
}

// waitHealthy waits until the project has exactly want[service] containers of each
// service, all running and healthy, or running where the image has no health check
// (the monitoring profile's Prometheus); compose 1.x has no `up --wait`.
func (c *composeRun) waitHealthy(want map[string]int, limit time.Duration) {
	c.t.Helper()
	var last string
	deadline := time.Now().Add(limit)
	for {
		healthy, states := map[string]int{}, []string{}
		for _, ct := range c.containers() {
			states = append(states, ct.Name+"="+ct.health())
			if h := ct.health(); h == "running/healthy" || h == "running/no healthcheck" {
				healthy[ct.service()]++
			}
		}
		slices.Sort(states)
		last = strings.Join(states, " ")
		if maps.Equal(healthy, want) && len(states) == composeCount(want) {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("after %s the containers are %s; want %v healthy", limit, last, want)
		}
		time.Sleep(time.Second)
	}
}

// streamChat streams a chat through the published frontend and returns the decode
// worker and prefill path named in the "tandem" extension and the number of chunks
// that carried text.
func (c *composeRun) streamChat(t *testing.T, content string, maxTokens int) (worker, path string, pieces int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	body, _ := json.Marshal(composeChatRequest{
		Model: "stories260K", MaxTokens: maxTokens, Stream: true,
		Messages: []composeMessage{{Role: "user", Content: content}},
	})
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+c.frontend+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("streamed chat: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := bufio.NewReader(resp.Body).Peek(512)
		t.Fatalf("streamed chat: status %d, content type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	done, err := eachSSE(resp.Body, func(data string) bool {
		var chunk sseChunk
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("streamed chat: chunk %q: %v", data, err)
		}
		if chunk.Error != nil {
			t.Fatalf("streamed chat: error in the stream: %s", chunk.Error.Message)
		}
		if chunk.Tandem != nil {
			worker, path = chunk.Tandem.DecodeWorker, chunk.Tandem.PrefillPath
		}
		for _, ch := range chunk.Choices {
			if ch.Delta.Content != "" {
				pieces++
			}
		}
		return true
	})
	if err != nil || !done {
		t.Fatalf("streamed chat ended without [DONE]: %v", err)
	}
	return worker, path, pieces
}

type composeChatRequest struct {
	Model     string           `json:"model"`
	Messages  []composeMessage `json:"messages"`
	MaxTokens int              `json:"max_tokens"`
	Stream    bool             `json:"stream"`
}

type composeMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func composeCount(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
