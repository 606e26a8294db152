package helmcheck

import (
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// vllmArgs reads vLLM's command line: --flag value pairs and bare switches.
func vllmArgs(args []string) map[string]string {
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		k, ok := strings.CutPrefix(args[i], "--")
		if !ok {
			continue
		}
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			out[k] = args[i+1]
			i++
		} else {
			out[k] = "true"
		}
	}
	return out
}

// TestVLLMPods: in values-vllm.yaml's worker pods the tandem worker and the vLLM
// server agree: the worker drives the server's port, subscribes to the KV event
// publisher and replay sockets the server binds, on the same topic, with the
// same block size and model; the server moves KV with NIXL (falling back to a
// local prefill rather than failing) and publishes events; it asks for its
// GPUs; and the tokenizer the worker reads is the one the init container
// writes, for the model the server serves. This is what docs/ENGINES.md says
// tandem needs of vLLM.
func TestVLLMPods(t *testing.T) {
	vals := values(t, "values-vllm.yaml")
	objs := render(t, vals, KubeVersions[1])
	deps := Of[*appsv1.Deployment](objs)
	for _, tc := range tandemContainers(t, objs, vals) {
		if tc.role != "prefill" && tc.role != "decode" {
			continue
		}
		where := "Deployment/" + tc.dep.Name
		spec := tc.dep.Spec.Template.Spec
		var eng *corev1.Container
		for i, c := range spec.Containers {
			if c.Name == "engine" {
				eng = &spec.Containers[i]
			}
		}
		if eng == nil {
			t.Fatalf("%s: no engine container beside the worker", where)
		}
		va := vllmArgs(eng.Args)
		port, ok := PortNamed(*eng, "engine")
		if !ok || va["port"] != strconv.Itoa(int(port)) {
			t.Errorf("%s: vLLM --port %s, its container port %d", where, va["port"], port)
		}
		u, err := url.Parse(tc.flags["engine-url"])
		if err != nil || u.Hostname() != "127.0.0.1" || u.Port() != va["port"] {
			t.Errorf("%s: --engine-url %s is not the vLLM server beside it on loopback port %s", where, tc.flags["engine-url"], va["port"])
		}
		if tc.flags["engine"] != "vllm" || tc.flags["model"] != va["model"] || tc.flags["block-size"] != va["block-size"] {
			t.Errorf("%s: worker --engine %s --model %s --block-size %s; vLLM --model %s --block-size %s", where,
				tc.flags["engine"], tc.flags["model"], tc.flags["block-size"], va["model"], va["block-size"])
		}
		if va["enable-prefix-caching"] != "true" {
			t.Errorf("%s: vLLM without --enable-prefix-caching", where)
		}
		var kt struct {
			Connector string `json:"kv_connector"`
			Role      string `json:"kv_role"`
			OnFailure string `json:"kv_load_failure_policy"`
		}
		if err := json.Unmarshal([]byte(va["kv-transfer-config"]), &kt); err != nil || kt.Connector != "NixlConnector" || kt.Role != "kv_both" || kt.OnFailure != "recompute" {
			t.Errorf("%s: --kv-transfer-config %s: want NixlConnector, kv_both, recompute (%v)", where, va["kv-transfer-config"], err)
		}
		var ke struct {
			Enable    bool   `json:"enable_kv_cache_events"`
			Publisher string `json:"publisher"`
			Endpoint  string `json:"endpoint"`
			Replay    string `json:"replay_endpoint"`
			Topic     string `json:"topic"`
		}
		if err := json.Unmarshal([]byte(va["kv-events-config"]), &ke); err != nil || !ke.Enable || ke.Publisher != "zmq" {
			t.Fatalf("%s: --kv-events-config %s: want ZMQ events on (%v)", where, va["kv-events-config"], err)
		}
		for _, p := range []struct{ flag, bound string }{{"kv-events-endpoint", ke.Endpoint}, {"kv-events-replay-endpoint", ke.Replay}} {
			w, err1 := url.Parse(tc.flags[p.flag])
			b, err2 := url.Parse(p.bound)
			if err1 != nil || err2 != nil || w.Port() == "" || w.Port() != b.Port() || w.Hostname() != "127.0.0.1" {
				t.Errorf("%s: --%s %s does not reach vLLM's %s", where, p.flag, tc.flags[p.flag], p.bound)
			}
		}
		if tc.flags["kv-events-topic"] != ke.Topic {
			t.Errorf("%s: --kv-events-topic %q, vLLM publishes on %q", where, tc.flags["kv-events-topic"], ke.Topic)
		}
		gpus := resource.MustParse(strconv.Itoa(int(dig(vals, "engine", "vllm", "gpus").(float64))))
		for kind, rl := range map[string]corev1.ResourceList{"requests": eng.Resources.Requests, "limits": eng.Resources.Limits} {
			if q, ok := rl["nvidia.com/gpu"]; !ok || q.Cmp(gpus) != 0 {
				t.Errorf("%s: vLLM %s nvidia.com/gpu %v, want %v", where, kind, rl["nvidia.com/gpu"], gpus.String())
			}
		}
		env, err := Env(*eng)
		if err != nil {
			t.Fatal(err)
		}
		if env["VLLM_NIXL_SIDE_CHANNEL_HOST"] != Downward["status.podIP"] {
			t.Errorf("%s: VLLM_NIXL_SIDE_CHANNEL_HOST %q, want the pod's address", where, env["VLLM_NIXL_SIDE_CHANNEL_HOST"])
		}
		if p, ok := PortNamed(*eng, "nixl"); !ok || env["VLLM_NIXL_SIDE_CHANNEL_PORT"] != strconv.Itoa(int(p)) {
			t.Errorf("%s: VLLM_NIXL_SIDE_CHANNEL_PORT %q, the container's nixl port %d", where, env["VLLM_NIXL_SIDE_CHANNEL_PORT"], p)
		}
		// The tokenizer: the volume the worker reads it from is the one the init
		// container writes, for the model vLLM serves.
		m, ok := MountOf(tc.c, tc.flags["tokenizer"])
		if !ok {
			t.Fatalf("%s: --tokenizer %s on no volume", where, tc.flags["tokenizer"])
		}
		wrote := false
		for _, ic := range spec.InitContainers {
			ienv, _ := Env(ic)
			for _, im := range ic.VolumeMounts {
				if im.Name == m.Name && im.MountPath == m.MountPath && !im.ReadOnly && ienv["MODEL"] == va["model"] {
					wrote = true
				}
			}
		}
		if !wrote {
			t.Errorf("%s: no init container writes volume %s for model %s", where, m.Name, va["model"])
		}
	}
	if len(deps) == 0 {
		t.Fatal("nothing rendered")
	}
}
