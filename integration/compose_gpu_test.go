package integration

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/services"
)

// compose/compose.gpu.yaml (vLLM prefill and decode servers behind tandem
// workers) cannot run here, with no GPU; docker-compose config checks that it
// merges with compose.yaml into what a user with GPUs starts: both vLLM servers
// with the NixlConnector, the recompute policy and KV events on, and the tandem
// workers each in front of its own server, following its events, with flags
// (through their TANDEM_* variables) that tandem accepts.
func TestComposeGPUConfig(t *testing.T) {
	var cmd []string
	switch {
	case exec.Command("docker", "compose", "version").Run() == nil:
		cmd = []string{"docker", "compose"}
	default:
		if _, err := exec.LookPath("docker-compose"); err != nil {
			t.Skip("neither docker compose (v2) nor docker-compose is installed")
		}
		cmd = []string{"docker-compose"}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	args := append(cmd[1:], "-p", "tandem-gpu", "-f", "../compose/compose.yaml", "-f", "../compose/compose.gpu.yaml", "config")
	c := exec.CommandContext(ctx, cmd[0], args...)
	c.Env = append(os.Environ(), "TANDEM_GPU_TOKENIZER=/srv/tokenizer.json", "TANDEM_GPU_MODEL=org/model-7b")
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("%v config: %v\n%s", cmd, err, out)
	}
	cfg := string(out)
	// service is one service's block of the merged file: the lines indented
	// under "  name:".
	service := func(name string) string {
		var b strings.Builder
		in := false
		for _, line := range strings.Split(cfg, "\n") {
			switch {
			case line == "  "+name+":":
				in = true
			case in && strings.HasPrefix(line, "    "):
				b.WriteString(line + "\n")
			case in:
				return b.String()
			}
		}
		if b.Len() == 0 {
			t.Fatalf("no service %s in\n%s", name, cfg)
		}
		return b.String()
	}
	for _, v := range []string{"vllm-prefill", "vllm-decode"} {
		s := service(v)
		for _, want := range []string{
			`"kv_connector":"NixlConnector"`, `"kv_role":"kv_both"`, `"kv_load_failure_policy":"recompute"`,
			`"enable_kv_cache_events":true`, `"publisher":"zmq"`, `"endpoint":"tcp://*:5557"`, `"replay_endpoint":"tcp://*:5558"`,
			"org/model-7b", "driver: nvidia", "VLLM_NIXL_SIDE_CHANNEL_HOST: " + v, "PYTHONHASHSEED: '0'",
		} {
			if !strings.Contains(s, want) {
				t.Errorf("%s lacks %s:\n%s", v, want, s)
			}
		}
	}
	for name, server := range map[string]string{"prefill": "vllm-prefill", "decode": "vllm-decode"} {
		s := service(name)
		for _, want := range []string{
			"TANDEM_ENGINE: vllm", "TANDEM_ENGINE_URL: http://" + server + ":8000", "TANDEM_KV_EVENTS_ENDPOINT: tcp://" + server + ":5557",
			"TANDEM_KV_EVENTS_REPLAY_ENDPOINT: tcp://" + server + ":5558", "TANDEM_KV_EVENTS_TOPIC: kv-events",
			"TANDEM_MODEL: org/model-7b", "TANDEM_TOKENIZER: /tandem/tokenizer.json", "/srv/tokenizer.json:/tandem/tokenizer.json:ro",
			server + ":\n        condition: service_healthy",
		} {
			if !strings.Contains(s, want) {
				t.Errorf("%s lacks %s:\n%s", name, want, s)
			}
		}
		// Every TANDEM_ variable names a flag the worker takes.
		for _, line := range strings.Split(s, "\n") {
			k, _, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || !strings.HasPrefix(k, "TANDEM_") {
				continue
			}
			help, _ := exec.Command(tandemBin, name, "-h").CombinedOutput()
			flag := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(k, "TANDEM_")), "_", "-")
			if services.EnvName(flag) != k || !strings.Contains(string(help), "  --"+flag+" ") && !strings.Contains(string(help), "  --"+flag+"\n") {
				t.Errorf("%s: %s is no flag of tandem %s", name, k, name)
			}
		}
	}
}
