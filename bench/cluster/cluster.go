// Package cluster starts a tandem deployment as separate processes on loopback,
// one per worker (optionally pinned to its own CPU with taskset) plus a router and
// a frontend, for benchmarks that compare deployments on equal hardware.
package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Deployment is one way to serve: aggregated workers, or one prefill worker and
// decode workers running a local-or-remote policy.
type Deployment struct {
	Name string
	// Mode is the decode workers' mode: "aggregated" or "decode".
	Mode string
	// Policy is the decode workers' --policy (decode mode only).
	Policy           string
	Prefill, Decode  int
	ExtraDecodeFlags []string
	// RouterFlags are extra flags for the router (e.g. --isl-gate).
	RouterFlags []string
	// Aggregated workers serve beside the decode workers of a decode deployment:
	// with the router's gating, the short prompts' class.
	Aggregated int
	// AggregatedFlags are extra flags for those aggregated workers; with
	// --lend-prefill they lend prefill, and the decode workers list them among
	// their prefill workers.
	AggregatedFlags []string
	// FrontendFlags are extra flags for the frontend (e.g. --refused-hold 10s).
	FrontendFlags []string
}

// Lends says whether the deployment's aggregated workers lend prefill.
func (d Deployment) Lends() bool {
	return d.Aggregated > 0 && slices.ContainsFunc(d.AggregatedFlags, func(f string) bool {
		return f == "--lend-prefill" || f == "-lend-prefill" || f == "--lend-prefill=true" || f == "-lend-prefill=true"
	})
}

// Policies are the decode policies tandem has.
var Policies = []string{"threshold", "cost", "load", "slo", "always-local", "always-remote"}

// Standard returns the deployments of a policy comparison on workers workers
// (at least 2): all of them aggregated, and for each policy one prefill worker
// with the rest decoding.
func Standard(workers int) []Deployment {
	ds := []Deployment{{Name: "aggregated", Mode: "aggregated", Decode: workers}}
	for _, p := range Policies {
		ds = append(ds, Deployment{Name: p, Mode: "decode", Policy: p, Prefill: 1, Decode: workers - 1})
	}
	return ds
}

// LogName makes a deployment's name, which may carry flags, a file name.
func LogName(name string) string {
	safe := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.', r == '@':
			return r
		}
		return '_'
	}, name)
	// A file name may be 255 bytes; a long deployment spec plus a process's
	// suffix would pass it. The hash keeps two long specs apart.
	if len(safe) > maxLogName {
		h := fnv.New32a()
		h.Write([]byte(name))
		safe = fmt.Sprintf("%s-%08x", safe[:maxLogName-9], h.Sum32())
	}
	return safe
}

// maxLogName leaves room under the file system's 255 bytes for the suffix a
// process adds ("-aggregated-12.log").
const maxLogName = 160

// Options are how every process of a deployment is started.
type Options struct {
	// Binary is the tandem executable.
	Binary string
	// WorkerArgs are passed to every worker (e.g. --engine sim).
	WorkerArgs []string
	// CPUs, when not empty, pins worker i to CPUs[i % len(CPUs)] with taskset; the
	// router and frontend are not pinned.
	CPUs []int
	// GOMAXPROCS, when positive, is set for the pinned workers. With one CPU Go
	// starts one P, and the engine's step loop then holds it for up to the 10ms
	// preemption slice, so a stream's tokens leave in bursts; two Ps on the one CPU
	// let the stream sender run between steps, while the compute stays bounded by
	// the pinned CPU.
	GOMAXPROCS int
	// LogDir receives each process's log as NAME.log.
	LogDir string
	// Ready bounds the wait for the deployment to serve.
	Ready time.Duration
}

// Cluster is a running deployment.
type Cluster struct {
	// URL is the frontend's base URL, RouterURL the router's (its /metrics).
	URL, RouterURL string
	procs          []*proc
}

type proc struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
	addr chan string
	done chan struct{}
}

// Start launches d: workers first, then the router over them, then the frontend,
// and returns once the frontend answers a generation request.
func Start(ctx context.Context, d Deployment, o Options) (*Cluster, error) {
	if d.Decode < 1 || d.Prefill < 0 {
		return nil, fmt.Errorf("cluster: %s: needs a decode worker", d.Name)
	}
	if o.Ready == 0 {
		o.Ready = 2 * time.Minute
	}
	c := &Cluster{}
	fail := func(err error) (*Cluster, error) {
		c.Stop()
		return nil, fmt.Errorf("cluster: %s: %w", d.Name, err)
	}
	worker, logName := 0, LogName(d.Name)
	start := func(name string, pin bool, args ...string) (string, error) {
		p, err := c.launch(name, o, pin, worker, args)
		if pin {
			worker++
		}
		if err != nil {
			return "", err
		}
		return p.wait(ctx, o.Ready)
	}
	var prefill, decode []string
	for i := range d.Prefill {
		args := append([]string{"prefill", "--listen", "127.0.0.1:0", "--id", fmt.Sprintf("prefill-%d", i)}, o.WorkerArgs...)
		a, err := start(fmt.Sprintf("%s-prefill-%d", logName, i), true, args...)
		if err != nil {
			return fail(err)
		}
		prefill = append(prefill, a)
	}
	// Aggregated workers first: the decode workers are given those that lend
	// prefill as prefill workers.
	lenders := slices.Clone(prefill)
	for i := range d.Aggregated {
		args := append([]string{"decode", "--listen", "127.0.0.1:0", "--id", fmt.Sprintf("aggregated-%d", i), "--mode", "aggregated"}, o.WorkerArgs...)
		args = append(args, d.AggregatedFlags...)
		a, err := start(fmt.Sprintf("%s-aggregated-%d", logName, i), true, args...)
		if err != nil {
			return fail(err)
		}
		decode = append(decode, a)
		if d.Lends() {
			lenders = append(lenders, a)
		}
	}
	for i := range d.Decode {
		args := []string{"decode", "--listen", "127.0.0.1:0", "--id", fmt.Sprintf("decode-%d", i), "--mode", d.Mode}
		if d.Mode == "decode" {
			args = append(args, "--policy", d.Policy, "--prefill-workers", strings.Join(lenders, ","))
		}
		args = append(append(args, o.WorkerArgs...), d.ExtraDecodeFlags...)
		a, err := start(fmt.Sprintf("%s-decode-%d", logName, i), true, args...)
		if err != nil {
			return fail(err)
		}
		decode = append(decode, a)
	}
	rargs := []string{"router", "--listen", "127.0.0.1:0", "--decode-workers", strings.Join(decode, ",")}
	if len(prefill) > 0 {
		rargs = append(rargs, "--prefill-workers", strings.Join(prefill, ","))
	}
	rargs = append(rargs, d.RouterFlags...)
	router, err := start(logName+"-router", false, rargs...)
	if err != nil {
		return fail(err)
	}
	fe, err := start(logName+"-frontend", false, append([]string{"frontend", "--listen", "127.0.0.1:0", "--router", router}, d.FrontendFlags...)...)
	if err != nil {
		return fail(err)
	}
	c.URL, c.RouterURL = "http://"+fe, "http://"+router
	if err := waitGenerating(ctx, c.URL, o.Ready); err != nil {
		return fail(err)
	}
	return c, nil
}

func (c *Cluster) launch(name string, o Options, pin bool, worker int, args []string) (*proc, error) {
	bin, cmdArgs := o.Binary, args
	if pin && len(o.CPUs) > 0 {
		cpu := o.CPUs[worker%len(o.CPUs)]
		bin, cmdArgs = "taskset", append([]string{"-c", strconv.Itoa(cpu), o.Binary}, args...)
	}
	cmd := exec.Command(bin, cmdArgs...)
	// The children get their flags from args only: a TANDEM_MODEL or TANDEM_SEED
	// meant for the benchmark must not reach the workers' --model and --seed.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TANDEM_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "TANDEM_LOG_LEVEL=info")
	if pin && len(o.CPUs) > 0 && o.GOMAXPROCS > 0 {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(o.GOMAXPROCS))
	}
	p := &proc{name: name, cmd: cmd, addr: make(chan string, 1), done: make(chan struct{})}
	if o.LogDir != "" {
		f, err := os.Create(filepath.Join(o.LogDir, name+".log"))
		if err != nil {
			return nil, err
		}
		p.log = f
		fmt.Fprintf(f, "# %s %s\n", bin, strings.Join(cmdArgs, " "))
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c.procs = append(c.procs, p)
	go p.scan(stderr)
	return p, nil
}

// scan copies the process's log and picks out the address it logs as listening on.
func (p *proc) scan(r io.Reader) {
	defer close(p.done)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if p.log != nil {
			p.log.Write(append(line, '\n'))
		}
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(line, &rec) == nil && strings.HasSuffix(rec.Msg, "listening") && rec.Addr != "" {
			select {
			case p.addr <- rec.Addr:
			default:
			}
		}
	}
	_, _ = io.Copy(io.Discard, r)
}

func (p *proc) wait(ctx context.Context, limit time.Duration) (string, error) {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case a := <-p.addr:
		return a, nil
	case <-p.done:
		return "", fmt.Errorf("%s exited before it listened (see its log)", p.name)
	case <-t.C:
		return "", fmt.Errorf("%s did not listen within %v", p.name, limit)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// waitGenerating waits for the frontend's /readyz, then sends a one-token
// completion until one succeeds: the frontend is up, has the model, and the
// router has found a worker. Polling /readyz first keeps the probe's 503s out
// of the frontend's log of failed requests.
func waitGenerating(ctx context.Context, url string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last error
	ready := false
	for time.Now().Before(deadline) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if !ready {
			req, _ := http.NewRequestWithContext(rctx, http.MethodGet, url+"/readyz", nil)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				// 404: a frontend without /readyz (an older tandem, a test's
				// stand-in); the completion probe alone says when it serves.
				ready = resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNotFound
				err = fmt.Errorf("GET /readyz: %s", resp.Status)
			}
			cancel()
			if !ready {
				last = err
				time.Sleep(200 * time.Millisecond)
			}
			continue
		}
		req, _ := http.NewRequestWithContext(rctx, http.MethodPost, url+"/v1/completions",
			strings.NewReader(`{"prompt": "ready", "max_tokens": 1}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				cancel()
				return nil
			}
			err = fmt.Errorf("POST /v1/completions: %s", resp.Status)
		}
		cancel()
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the frontend did not generate within %v: %v", limit, last)
}

// Stop asks every process to end (SIGTERM), frontend first, waits up to 20s for
// each, then kills what is left.
func (c *Cluster) Stop() error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		wg.Add(1)
		go func() {
			defer wg.Done()
			exited := make(chan error, 1)
			go func() { <-p.done; exited <- p.cmd.Wait() }()
			select {
			case <-exited:
			case <-time.After(20 * time.Second):
				_ = p.cmd.Process.Kill()
				<-exited
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s did not stop within 20s and was killed", p.name))
				mu.Unlock()
			}
			if p.log != nil {
				p.log.Close()
			}
		}()
	}
	wg.Wait()
	c.procs = nil
	return errors.Join(errs...)
}

// CPUs returns the CPUs this process may run on, for pinning workers one per CPU,
// or nil if they cannot be read.
func CPUs() []int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return parseCPUList(strings.TrimSpace(v))
		}
	}
	return nil
}

// parseCPUList parses a Linux CPU list such as "0-3,6", or returns nil.
func parseCPUList(s string) []int {
	var set []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil
			}
		}
		for x := a; x <= b; x++ {
			set = append(set, x)
		}
	}
	return set
}
