package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckConfig: --check-config accepts a command the role would start with,
// says what is wrong with one it would refuse (a bad value, a bad combination,
// a file it could not read, from flags or TANDEM_ variables), and serves nothing
// either way: each case returns at once.
func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("00000000-0000-0000-0000-000000000000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want string // "" for ok
	}{
		{"frontend", []string{"frontend", "--listen", "0.0.0.0:8080", "--consul", "127.0.0.1:8500", "--consul-token-file", token}, nil, ""},
		{"router", []string{"router", "--listen", "0.0.0.0:9000", "--consul", "127.0.0.1:8500"}, nil, ""},
		{"prefill", []string{"prefill", "--listen", "0.0.0.0:9000", "--kv-listen", "0.0.0.0:9001", "--consul", "127.0.0.1:8500"}, nil, ""},
		{"decode from the environment", []string{"decode"},
			map[string]string{"TANDEM_MODE": "decode", "TANDEM_CONSUL": "127.0.0.1:8500", "TANDEM_ENGINE": "sim"}, ""},
		{"frontend without a router", []string{"frontend"}, nil, "--router"},
		{"router without workers", []string{"router"}, nil, "--decode-workers"},
		{"unknown mode", []string{"decode", "--mode", "both", "--consul", "c:8500"}, nil, `--mode "both"`},
		{"kv port on a decode worker", []string{"decode", "--kv-listen", "0.0.0.0:9001", "--consul", "c:8500"}, nil, "--kv-listen"},
		{"bad listen address", []string{"router", "--listen", "9000", "--consul", "c:8500"}, nil, "--listen"},
		{"bad advertise address", []string{"router", "--advertise", "10.0.0.1", "--consul", "c:8500"}, nil, "--advertise"},
		{"token file missing", []string{"router", "--consul", "c:8500", "--consul-token-file", missing}, nil, "--consul-token-file"},
		{"token file missing, from the environment", []string{"router", "--consul", "c:8500"},
			map[string]string{"TANDEM_CONSUL_TOKEN_FILE": missing}, "--consul-token-file"},
		{"GGUF model missing", []string{"decode", "--consul", "c:8500", "--model", missing}, nil, "--model"},
		{"tokenizer missing", []string{"decode", "--consul", "c:8500", "--engine", "vllm", "--engine-url", "http://127.0.0.1:8000",
			"--tokenizer", missing}, nil, "--tokenizer"},
		{"check timeout above its interval", []string{"router", "--consul", "c:8500", "--check-timeout", "5s"}, nil, "--check-timeout"},
		{"bad log level", []string{"router", "--consul", "c:8500", "--log-level", "loud"}, nil, "--log-level"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append(append([]string{}, c.args[0], "--check-config"), c.args[1:]...)
			err := run(context.Background(), args, envOf(c.env), &out, &errOut)
			if c.want == "" {
				if err != nil {
					t.Fatalf("tandem %s: %v", strings.Join(args, " "), err)
				}
				if want := "tandem " + c.args[0] + ": configuration ok"; !strings.Contains(out.String(), want) {
					t.Errorf("stdout %q, want %q", out.String(), want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("tandem %s: error %v, want one naming %s", strings.Join(args, " "), err, c.want)
			}
		})
	}
}
