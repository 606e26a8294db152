package helmcheck

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// probeEnv, when set, makes TestPodsServe the probing half, run inside the
// "node"'s network namespace: the pods to probe, as JSON.
const probeEnv = "HELMCHECK_PODS"

// podPlan is what the probing half needs of one pod.
type podPlan struct {
	Role      string
	IP        string
	Readiness *corev1.Probe
	Liveness  *corev1.Probe
	Ports     map[string]int32 // by name
}

// hostIP is the "node"'s address, where its Consul agent listens; pods get
// 10.244.1.10 and up on the node's bridge.
const (
	hostIP  = "172.18.0.3"
	nodeNet = "10.244.1"
)

// TestPodsServe runs the default values' pods as a node would: each tandem
// command exactly as rendered, with its environment, in a network namespace of
// its own at its own pod address, all on one bridge, and a Consul agent at the
// node's address (consul.hostAgent). It then probes each pod the way its probes
// say, waits for every readiness probe to pass, and sends a chat completion
// through the frontend's port whose prompt is long enough for the decode worker
// to prefill it on the prefill worker, over the KV port the chart opens. No
// cluster is involved: what it shows is that the rendered commands, ports,
// probes, advertised addresses and Consul address make a suite that serves.
// It needs root (network namespaces) and the Consul agent
// (scripts/install-consul.sh); without them it is skipped, saying why.
func TestPodsServe(t *testing.T) {
	if plan := os.Getenv(probeEnv); plan != "" {
		probePods(t, plan)
		return
	}
	if testing.Short() {
		t.Skip("starts the suite")
	}
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip command (iproute2) to make network namespaces")
	}
	consul := os.Getenv("TANDEM_CONSUL_BIN")
	if consul == "" {
		out, err := exec.Command(filepath.Join(repoRoot, "scripts", "install-consul.sh")).Output()
		if err != nil {
			t.Skipf("no Consul agent: TANDEM_CONSUL_BIN is not set and scripts/install-consul.sh failed: %v", err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		consul = lines[len(lines)-1]
	}
	bin := tandem(t)

	vals := map[string]any{}
	objs := render(t, vals, KubeVersions[1])
	ips := map[string]string{}
	for i, r := range roles {
		ips[Release+"-"+r] = fmt.Sprintf("%s.%d", nodeNet, 10+i)
	}
	tcs := tandemContainersIn(t, objs, vals, func(dep string) map[string]string {
		return map[string]string{"metadata.name": dep + "-0", "status.podIP": ips[dep], "status.hostIP": hostIP}
	})

	// The node: a namespace with the pods' bridge, its addresses, and Consul.
	prefix := fmt.Sprintf("hc%d", os.Getpid())
	node := prefix + "-node"
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	nsAdd := func(ns string) {
		ip("netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		ip("-n", ns, "link", "set", "lo", "up")
	}
	if out, err := exec.Command("ip", "netns", "add", node).CombinedOutput(); err != nil {
		t.Skipf("cannot make a network namespace here: %v %s", err, bytes.TrimSpace(out))
	}
	_ = exec.Command("ip", "netns", "del", node).Run()
	nsAdd(node)
	ip("-n", node, "link", "add", "br0", "type", "bridge")
	ip("-n", node, "addr", "add", nodeNet+".1/24", "dev", "br0")
	ip("-n", node, "addr", "add", hostIP+"/32", "dev", "br0")
	ip("-n", node, "link", "set", "br0", "up")
	logs := t.TempDir()
	if d := os.Getenv("HELMCHECK_LOGS"); d != "" {
		logs = d // kept, for a look after a failure
	}
	start := func(ns, name string, args, env []string, dir string) {
		t.Helper()
		f, err := os.Create(filepath.Join(logs, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...)
		cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = env, dir, f, f
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			f.Close()
			if t.Failed() {
				b, _ := os.ReadFile(f.Name())
				t.Logf("%s's output:\n%s", name, lastLines(string(b), 30))
			}
		})
	}
	agentPort := fmt.Sprint(dig(vals, "consul", "hostAgentPort"))
	start(node, "consul", []string{consul, "agent", "-dev", "-node=node", "-bind=" + nodeNet + ".1", "-client=0.0.0.0",
		"-http-port=" + agentPort, "-grpc-port=-1", "-grpc-tls-port=-1", "-dns-port=-1", "-serf-wan-port=-1"}, os.Environ(), logs)

	// As on a node, the agent serves before the pods start.
	for deadline := time.Now().Add(time.Minute); ; {
		cmd := exec.Command("ip", "netns", "exec", node, consul, "catalog", "services")
		cmd.Env = append(os.Environ(), "CONSUL_HTTP_ADDR=127.0.0.1:"+agentPort)
		if cmd.Run() == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Consul agent did not serve within a minute")
		}
		time.Sleep(200 * time.Millisecond)
	}

	var plans []podPlan
	for i, tc := range tcs {
		ns := prefix + "-" + tc.role
		nsAdd(ns)
		veth := fmt.Sprintf("v%d", i)
		ip("-n", node, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
		ip("-n", node, "link", "set", veth, "master", "br0", "up")
		ip("-n", ns, "addr", "add", ips[tc.dep.Name]+"/24", "dev", "eth0")
		ip("-n", ns, "link", "set", "eth0", "up")
		ip("-n", ns, "route", "add", "default", "via", nodeNet+".1")
		root := t.TempDir()
		args, env := commandLine(t, tc, root)
		start(ns, tc.role, append([]string{bin}, args...), env, root)
		ports := map[string]int32{}
		for _, p := range tc.c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		plans = append(plans, podPlan{Role: tc.role, IP: ips[tc.dep.Name], Readiness: tc.c.ReadinessProbe, Liveness: tc.c.LivenessProbe, Ports: ports})
	}

	// The probing half: this test binary again, in the node's namespace.
	b, err := json.Marshal(plans)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", node, self, "-test.run=^TestPodsServe$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), probeEnv+"="+string(b), "HELMCHECK_TANDEM="+bin)
	out, err := cmd.CombinedOutput()
	t.Logf("probes, from the node:\n%s", out)
	if err != nil {
		t.Fatalf("the probing half failed: %v", err)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// probePods is the node's half: the kubelet's probes, then a client's request.
func probePods(t *testing.T, plan string) {
	var pods []podPlan
	if err := json.Unmarshal([]byte(plan), &pods); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	var frontend podPlan
	for _, p := range pods {
		if p.Role == "frontend" {
			frontend = p
		}
		for kind, pr := range map[string]*corev1.Probe{"liveness": p.Liveness, "readiness": p.Readiness} {
			var last error
			for {
				if last = probe(p, pr); last == nil {
					t.Logf("%s: %s probe passes", p.Role, kind)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s at %s: %s probe still fails: %v", p.Role, p.IP, kind, last)
				}
				time.Sleep(500 * time.Millisecond)
			}
		}
	}
	// A prompt far past the decode worker's 128-token threshold: the decode worker
	// prefills it on the prefill worker and imports its KV over the KV port. A
	// decode worker serves once Consul has answered it, perhaps before the prefill
	// worker registered: until its watch brings the prefill worker, a long prompt
	// falls back to a local prefill, so the request is repeated for a while.
	body := `{"model":"stories260K","max_tokens":8,"temperature":0,"messages":[{"role":"user","content":"` +
		strings.Repeat("Once upon a time there was a little girl. ", 20) + `"}]}`
	url := "http://" + net.JoinHostPort(frontend.IP, strconv.Itoa(int(frontend.Ports["http"]))) + "/v1/chat/completions"
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		path := resp.Header.Get("X-Tandem-Prefill-Path")
		t.Logf("POST %s: %s, prefill path %q: %s", url, resp.Status, path, bytes.TrimSpace(b))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("the chat completion: %s", resp.Status)
		}
		if path == "remote" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute the long prompt is still prefilled %q, want remote", path)
		}
	}
}

// probe runs one probe as the kubelet does, against the pod's address.
func probe(p podPlan, pr *corev1.Probe) error {
	if pr == nil {
		return nil
	}
	port := func(name string, num int32) string {
		if n, ok := p.Ports[name]; ok {
			num = n
		}
		return net.JoinHostPort(p.IP, strconv.Itoa(int(num)))
	}
	timeout := time.Duration(max(1, pr.TimeoutSeconds)) * time.Second
	switch {
	case pr.HTTPGet != nil:
		c := http.Client{Timeout: timeout}
		resp, err := c.Get("http://" + port(pr.HTTPGet.Port.StrVal, pr.HTTPGet.Port.IntVal) + pr.HTTPGet.Path)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("GET %s: %s %s", pr.HTTPGet.Path, resp.Status, bytes.TrimSpace(b))
		}
		return nil
	case pr.TCPSocket != nil:
		c, err := net.DialTimeout("tcp", port(pr.TCPSocket.Port.StrVal, pr.TCPSocket.Port.IntVal), timeout)
		if err != nil {
			return err
		}
		return c.Close()
	case pr.GRPC != nil:
		// grpc.health.v1 as the kubelet asks it: tandem health exits 0 only for SERVING.
		addr := port("", pr.GRPC.Port)
		out, err := exec.Command(os.Getenv("HELMCHECK_TANDEM"), "health", addr, "--timeout", timeout.String()).CombinedOutput()
		if err != nil {
			return fmt.Errorf("grpc health %s: %v %s", addr, err, bytes.TrimSpace(out))
		}
		return nil
	}
	return fmt.Errorf("a probe the test does not model: %+v", pr)
}
