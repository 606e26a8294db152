package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary stands in for tandem: with FAKE_TANDEM_DIR set it plays the
// service its first argument names, logs where it listens as tandem does, writes
// its arguments and environment to FAKE_TANDEM_DIR, and exits on SIGTERM.
func TestMain(m *testing.M) {
	if dir := os.Getenv("FAKE_TANDEM_DIR"); dir != "" {
		fakeTandem(dir, os.Args[1:])
		return
	}
	os.Exit(m.Run())
}

func fakeTandem(dir string, args []string) {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	role, id := args[0], args[0]
	if i := slices.Index(args, "--id"); i >= 0 {
		id = args[i+1]
	}
	env := []string{}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "TANDEM_") || strings.HasPrefix(kv, "GOMAXPROCS=") {
			env = append(env, kv)
		}
	}
	_ = os.WriteFile(filepath.Join(dir, id+".args"), []byte(strings.Join(args, " ")+"\n"+strings.Join(env, " ")), 0o644)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.Exit(3)
	}
	if role == "frontend" {
		go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"choices":[{"text":"x"}]}`)
		}))
	}
	fmt.Fprintf(os.Stderr, `{"level":"INFO","msg":"%s listening","addr":%q}`+"\n", role, ln.Addr().String())
	<-stop
	os.Exit(0)
}

func readArgs(t *testing.T, dir, id string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, id+".args"))
	if err != nil {
		t.Fatalf("%s was not started: %v", id, err)
	}
	return string(b)
}

func TestStartWiresTheDeploymentAndStopEndsIt(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("FAKE_TANDEM_DIR", dir)
	t.Setenv("TANDEM_MODEL", "meant-for-the-benchmark")
	d := Standard(3)[1] // threshold: one prefill worker, two decode workers
	if d.Name != "threshold" || d.Prefill != 1 || d.Decode != 2 {
		t.Fatalf("Standard(3)[1] = %+v", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Start(ctx, d, Options{Binary: os.Args[0], WorkerArgs: []string{"--engine", "sim"}, LogDir: dir, Ready: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.URL, "http://127.0.0.1:") {
		t.Errorf("URL %q", c.URL)
	}
	prefill, decode := readArgs(t, dir, "prefill-0"), readArgs(t, dir, "decode-1")
	if !strings.Contains(prefill, "prefill --listen 127.0.0.1:0 --id prefill-0 --engine sim") {
		t.Errorf("prefill started as %q", prefill)
	}
	if !strings.Contains(decode, "--mode decode --policy threshold --prefill-workers 127.0.0.1:") || !strings.Contains(decode, "--engine sim") {
		t.Errorf("decode started as %q", decode)
	}
	router := readArgs(t, dir, "router")
	if strings.Count(router, "--decode-workers 127.0.0.1:") != 1 || !strings.Contains(router, "--prefill-workers 127.0.0.1:") {
		t.Errorf("router started as %q", router)
	}
	if strings.Contains(decode, "TANDEM_MODEL") || !strings.Contains(decode, "TANDEM_LOG_LEVEL=info") {
		t.Errorf("decode environment: %q; want TANDEM_LOG_LEVEL only", decode)
	}
	if _, err := os.Stat(filepath.Join(dir, "threshold-decode-0.log")); err != nil {
		t.Errorf("no log file: %v", err)
	}
	procs := slices.Clone(c.procs)
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.cmd.ProcessState == nil || !p.cmd.ProcessState.Exited() {
			t.Errorf("%s still runs after Stop", p.name)
		}
	}
}

func TestStartPinsWorkersWithTaskset(t *testing.T) {
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Skip("no taskset")
	}
	cpus := CPUs()
	if len(cpus) == 0 {
		t.Skip("cannot read the CPU list")
	}
	dir := t.TempDir()
	t.Setenv("FAKE_TANDEM_DIR", dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Start(ctx, Standard(2)[0], Options{Binary: os.Args[0], CPUs: cpus[:1], GOMAXPROCS: 2, Ready: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	for _, p := range c.procs {
		pinned := p.cmd.Args[0] == "taskset"
		if worker := strings.Contains(p.name, "decode"); pinned != worker {
			t.Errorf("%s: pinned %v (%v)", p.name, pinned, p.cmd.Args)
		}
	}
	if a := readArgs(t, dir, "decode-0"); !strings.Contains(a, "--mode aggregated") || !strings.Contains(a, "GOMAXPROCS=2") {
		t.Errorf("aggregated worker started as %q", a)
	}
	if a := readArgs(t, dir, "router"); strings.Contains(a, "--prefill-workers") || strings.Contains(a, "GOMAXPROCS") {
		t.Errorf("router of an aggregated deployment started as %q", a)
	}
}

func TestStartFailsWhenAProcessDies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := Start(ctx, Standard(2)[0], Options{Binary: "/bin/false", Ready: 10 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "exited before it listened") {
		t.Errorf("Start with a binary that exits: %v", err)
	}
}

func TestParseCPUList(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
	}{{"0-3,6", []int{0, 1, 2, 3, 6}}, {"1", []int{1}}, {"0-1", []int{0, 1}}, {"x", nil}, {"3-1", nil}} {
		if got := parseCPUList(c.in); !slices.Equal(got, c.want) {
			t.Errorf("parseCPUList(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

// Aggregated workers that lend prefill start first, with their flags, and the
// decode workers are given them as prefill workers; the router tracks them once,
// among the decode workers, and learns from them that they lend.
func TestStartWiresLenders(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("FAKE_TANDEM_DIR", dir)
	ds, err := Parse("load@0+2{aggregated: --lend-prefill}{frontend: --refused-hold 3s}", 3)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Start(ctx, ds[0], Options{Binary: os.Args[0], WorkerArgs: []string{"--engine", "sim"}, LogDir: dir, Ready: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	for _, id := range []string{"aggregated-0", "aggregated-1"} {
		if a := readArgs(t, dir, id); !strings.Contains(a, "--mode aggregated --engine sim --lend-prefill") {
			t.Errorf("%s started as %q", id, a)
		}
	}
	if fe := readArgs(t, dir, "frontend"); !strings.Contains(fe, "--refused-hold 3s") {
		t.Errorf("frontend started as %q; want its {frontend: ...} flags", fe)
	}
	decode := readArgs(t, dir, "decode-0")
	if _, after, ok := strings.Cut(decode, "--prefill-workers "); !ok || strings.Count(strings.Fields(after)[0], "127.0.0.1:") != 2 {
		t.Errorf("decode started as %q; want both lenders as its prefill workers", decode)
	}
	router := readArgs(t, dir, "router")
	if _, after, ok := strings.Cut(router, "--decode-workers "); !ok || strings.Count(strings.Fields(after)[0], "127.0.0.1:") != 3 ||
		strings.Contains(router, "--prefill-workers") {
		t.Errorf("router started as %q", router)
	}
}

// A deployment spec longer than a file name may be still names its logs,
// short, and two long specs differing only at their end get different names.
func TestLogNameOfALongSpec(t *testing.T) {
	long := "slo@0+2{--ttft-slo-ms 8000 --tpot-slo-ms 0 --tbt-slo-ms 400 --sim-max-batched-tokens 2048 --slo-prefer faster}{aggregated: --lend-prefill --sim-max-batched-tokens 2048}{router: --planner --planner-interval 2s --planner-dwell 10s}"
	a, b := LogName(long), LogName(long+"x")
	if len(a)+len("-aggregated-12.log") > 255 || a == b {
		t.Errorf("LogName = %q (%d bytes) and %q", a, len(a), b)
	}
	if got := LogName("slo@2{--x 1}"); got != "slo@2_--x_1_" {
		t.Errorf("LogName of a short spec = %q", got)
	}
}
