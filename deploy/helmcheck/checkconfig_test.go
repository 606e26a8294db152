package helmcheck

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// repoRoot is the tandem repository this module sits in.
const repoRoot = "../.."

var (
	buildOnce sync.Once
	tandemBin string
	buildErr  error
)

// tandem builds cmd/tandem from the repository (the server's module, not this
// one) once per test binary.
func tandem(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "helmcheck-tandem")
		if err != nil {
			buildErr = err
			return
		}
		tandemBin = filepath.Join(dir, "tandem")
		cmd := exec.Command("go", "build", "-o", tandemBin, "./cmd/tandem")
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = err
			tandemBin = string(out)
		}
	})
	if buildErr != nil {
		t.Fatalf("go build ./cmd/tandem: %v\n%s", buildErr, tandemBin)
	}
	return tandemBin
}

// stand-ins for the files a pod's volumes hold, by the flag that reads them: a
// real tokenizer (the embedded model's GGUF, which --tokenizer also takes) and
// model, a chat template, and for a Secret's items their text.
func standIn(flag string) ([]byte, error) {
	switch flag {
	case "tokenizer", "model":
		return os.ReadFile(filepath.Join(repoRoot, "models", "stories260K.gguf"))
	case "chat-template":
		return []byte("{% for m in messages %}{{ m.content }}{% endfor %}"), nil
	case "api-keys-file":
		return []byte("key-1\n"), nil
	}
	return []byte("00000000-0000-0000-0000-000000000000\n"), nil
}

// commandLine is the container's tandem command line and environment as the
// kubelet would start it, with every file it names laid at the same path under
// root, which stands for the pod's volumes.
func commandLine(t *testing.T, tc tandemContainer, root string) (args, env []string) {
	t.Helper()
	rewrite := func(flag, v string) string {
		if !strings.HasPrefix(v, "/") {
			return v
		}
		if _, ok := MountOf(tc.c, v); !ok {
			return v // the test of mounts reports it; tandem will not find it either
		}
		p := filepath.Join(root, v)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := standIn(flag)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	args = []string{tc.role}
	for _, a := range tc.args[1:] {
		if k, v, ok := strings.Cut(a, "="); ok {
			a = k + "=" + rewrite(strings.TrimPrefix(k, "--"), v)
		}
		args = append(args, a)
	}
	env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range tc.env {
		env = append(env, k+"="+rewrite(k, v))
	}
	return args, env
}

// runCheck runs the container's command line through tandem ROLE --check-config.
func runCheck(t *testing.T, tc tandemContainer) (string, error) {
	t.Helper()
	root := t.TempDir()
	args, env := commandLine(t, tc, root)
	args = append([]string{args[0], "--check-config"}, args[1:]...)
	bin := tandem(t) // built before the clock starts
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env, cmd.Dir = env, root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return "tandem " + strings.Join(args, " ") + "\n" + out.String(), err
}

// TestCommandsStart: every tandem command line the chart renders, with the
// environment the pod gives it, is one the real binary accepts and would start
// with: its flags exist for that role, their values and combinations pass the
// role's own checks, and the files they name can be read where the pod mounts
// them.
func TestCommandsStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/tandem")
	}
	for _, f := range valuesFiles {
		t.Run(f, func(t *testing.T) {
			vals := values(t, f)
			objs := render(t, vals, KubeVersions[1])
			for _, tc := range tandemContainers(t, objs, vals) {
				out, err := runCheck(t, tc)
				if err != nil || !strings.Contains(out, "configuration ok") {
					t.Errorf("Deployment/%s: %v\n%s", tc.dep.Name, err, out)
				}
			}
			// helm test's pod runs tandem health: its flags parse (--help after
			// them stops it before it calls anything).
			for _, p := range Of[*corev1.Pod](objs) {
				for _, c := range p.Spec.Containers {
					out, err := exec.Command(tandem(t), append(c.Args, "--help")...).CombinedOutput()
					if err != nil || !strings.Contains(string(out), "Usage: tandem "+c.Args[0]) {
						t.Errorf("Pod/%s: tandem %s --help: %v\n%s", p.Name, strings.Join(c.Args, " "), err, out)
					}
				}
			}
		})
	}
}

// TestCommandsThatWouldNotStart: values that pass the schema but make a command
// tandem refuses fail the test above, with tandem's own message.
func TestCommandsThatWouldNotStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/tandem")
	}
	for _, c := range []struct {
		name, role string
		vals       map[string]any
		want       string
	}{
		{"a flag no role has", "router", map[string]any{"router": map[string]any{"extraArgs": []any{"--no-such-flag=1"}}}, "no-such-flag"},
		{"a KV port on a decode worker", "decode", map[string]any{"decode": map[string]any{"extraArgs": []any{"--kv-listen=0.0.0.0:9001"}}}, "--kv-listen"},
		{"a bad value", "prefill", map[string]any{"prefill": map[string]any{"extraArgs": []any{"--max-queued-tokens=many"}}}, "max-queued-tokens"},
		{"a file no volume holds", "frontend", map[string]any{"frontend": map[string]any{"extraArgs": []any{"--api-keys-file=/etc/keys"}}}, "--api-keys-file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, tc := range tandemContainers(t, render(t, c.vals, KubeVersions[1]), c.vals) {
				if tc.role != c.role {
					continue
				}
				out, err := runCheck(t, tc)
				if err == nil || !strings.Contains(out, c.want) {
					t.Errorf("%s: err %v, want tandem to refuse naming %s:\n%s", c.name, err, c.want, out)
				}
				return
			}
			t.Fatalf("no %s container rendered", c.role)
		})
	}
}
