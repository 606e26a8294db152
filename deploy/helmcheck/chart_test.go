package helmcheck

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"sigs.k8s.io/yaml"
)

const chartDir = "../helm/tandem"

// valuesFiles are the values files the chart ships, each tested as a user
// passes it: helm install -f FILE (values.yaml alone is the default).
var valuesFiles = []string{"values.yaml", "values-cpu.yaml", "values-vllm.yaml"}

func values(t *testing.T, file string) map[string]any {
	t.Helper()
	if file == "values.yaml" {
		return map[string]any{}
	}
	v, err := LoadValues(filepath.Join(chartDir, file))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func render(t *testing.T, vals map[string]any, kube string) []Object {
	t.Helper()
	objs, err := Render(chartDir, vals, kube)
	if err != nil {
		t.Fatalf("helm template (Kubernetes %s): %v", kube, err)
	}
	return objs
}

// TestLint: helm lint --strict over each values file at both ends of the
// supported Kubernetes versions finds nothing above INFO.
func TestLint(t *testing.T) {
	for _, f := range valuesFiles {
		for _, kube := range KubeVersions {
			t.Run(f+"@"+kube, func(t *testing.T) {
				msgs, err := Lint(chartDir, values(t, f), kube)
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range msgs {
					if m.Severity > support.InfoSev {
						t.Errorf("helm lint: %s", m)
					} else {
						t.Logf("helm lint: %s", m)
					}
				}
			})
		}
	}
}

// TestRenderDecodesStrictly: helm template over each values file yields the
// objects each deployment needs, and every one decodes strictly into its
// Kubernetes type (Render fails on an unknown field or kind).
func TestRenderDecodesStrictly(t *testing.T) {
	roles := []string{"frontend", "router", "prefill", "decode"}
	for _, f := range valuesFiles {
		for _, kube := range KubeVersions {
			t.Run(f+"@"+kube, func(t *testing.T) {
				objs := render(t, values(t, f), kube)
				have := map[string]bool{}
				for _, o := range objs {
					have[o.Kind+"/"+o.Name] = true
				}
				want := []string{}
				for _, r := range roles {
					n := Release + "-" + r
					want = append(want, "Deployment/"+n, "Service/"+n, "PodDisruptionBudget/"+n, "NetworkPolicy/"+n)
				}
				want = append(want, "Pod/tandem-test")
				switch f {
				case "values-cpu.yaml":
					want = append(want, "Deployment/tandem-consul", "Service/tandem-consul", "NetworkPolicy/tandem-consul")
				case "values-vllm.yaml":
					for _, r := range roles {
						want = append(want, "ServiceMonitor/"+Release+"-"+r)
					}
					want = append(want, "PrometheusRule/tandem-alerts", "ConfigMap/tandem-dashboard")
				}
				for _, w := range want {
					if !have[w] {
						t.Errorf("no %s among %v", w, Kinds(objs))
					}
				}
				if len(have) != len(want) {
					t.Errorf("%d objects, want %d: %v", len(have), len(want), Kinds(objs))
				}
			})
		}
	}
}

// TestStrictDecodingCatchesTypos: the decoder the tests rely on refuses what the
// API server's strict validation refuses.
func TestStrictDecodingCatchesTypos(t *testing.T) {
	for _, c := range []struct{ name, raw, want string }{
		{"unknown field", "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {selctor: {a: b}}\n", "unknown field"},
		{"duplicate field", "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {type: ClusterIP, type: NodePort}\n", `"type" already set`},
		{"wrong type", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: two}\n", "replicas"},
		{"unknown kind", "apiVersion: v1\nkind: Servise\nmetadata: {name: x}\n", "Servise"},
		{"ServiceMonitor field", "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x}\nspec: {endpoints: [{prot: http}]}\n", "unknown field"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(c.raw)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Decode: %v, want an error naming %q", err, c.want)
			}
		})
	}
}

// TestServed: an API version that some supported Kubernetes release does not
// serve is refused (strict decoding alone accepts it: k8s.io/api keeps old types).
func TestServed(t *testing.T) {
	for _, raw := range []string{
		"apiVersion: policy/v1beta1\nkind: PodDisruptionBudget\nmetadata: {name: x}\n",
		"apiVersion: autoscaling/v2beta2\nkind: HorizontalPodAutoscaler\nmetadata: {name: x}\n",
	} {
		// k8s.io/api drops a type some releases after Kubernetes stops serving it:
		// either step may refuse it.
		obj, err := Decode(raw)
		if err == nil {
			err = Served(obj, 27, 37)
		}
		if err == nil {
			t.Errorf("%s: accepted", strings.SplitN(raw, "\n", 2)[0])
		} else {
			t.Logf("%s: %v", strings.SplitN(raw, "\n", 2)[0], err)
		}
	}
	for _, f := range valuesFiles {
		for _, o := range render(t, values(t, f), KubeVersions[1]) {
			if err := Served(o.Obj, 27, 37); err != nil {
				t.Errorf("%s: %s/%s: %v", f, o.Kind, o.Name, err)
			}
		}
	}
}

// TestKubeVersionFloor: below the supported range the chart refuses to render,
// naming the constraint.
func TestKubeVersionFloor(t *testing.T) {
	_, err := Render(chartDir, map[string]any{}, "1.26.9")
	if err == nil || !strings.Contains(err.Error(), "kubeVersion") {
		t.Fatalf("rendering for Kubernetes 1.26: %v, want the kubeVersion constraint", err)
	}
}

// TestBadValuesRefused: values.schema.json refuses bad values at lint, template
// and install time with a message naming the key.
func TestBadValuesRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		vals string
		want []string
	}{
		{"unknown engine", "engine: {kind: tpu}", []string{"/engine/kind", "native"}},
		{"typo in a key", "frontend: {replica: 3}", []string{"/frontend", "replica"}},
		{"negative replicas", "decode: {replicas: -1}", []string{"/decode/replicas"}},
		{"no Consul", "consul: {hostAgent: false}", []string{"/consul", "address"}},
		{"Consul address without a port", "consul: {hostAgent: false, address: consul.example}", []string{"/consul/address"}},
		{"two Consuls", "consul: {hostAgent: true, devAgent: {enabled: true}}", []string{"/consul"}},
		{"a flag without dashes", "decode: {extraArgs: [policy=slo]}", []string{"/decode/extraArgs/0"}},
		{"a bad duration", "consul: {checkInterval: 2 seconds}", []string{"/consul/checkInterval"}},
		{"vLLM tokenizer from nowhere", "engine: {kind: vllm, vllm: {tokenizer: {fromHub: false}}}", []string{"/engine/vllm/tokenizer"}},
		{"unknown policy", "decode: {policy: fastest}", []string{"/decode/policy"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var v map[string]any
			if err := yaml.Unmarshal([]byte(c.vals), &v); err != nil {
				t.Fatal(err)
			}
			_, err := Render(chartDir, v, KubeVersions[1])
			if err == nil {
				t.Fatalf("values %s rendered", c.vals)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("values %s: error does not name %q:\n%v", c.vals, w, err)
				}
			}
			msgs, _ := Lint(chartDir, v, KubeVersions[1])
			failed := false
			for _, m := range msgs {
				failed = failed || m.Severity >= support.ErrorSev
			}
			if !failed {
				t.Errorf("helm lint passed values %s", c.vals)
			}
		})
	}
}

// TestMonitoringCopies: the chart's alert rules and dashboard are
// deploy/monitoring's, byte for byte (Helm reads no file outside the chart), and
// the PrometheusRule carries every rule group.
func TestMonitoringCopies(t *testing.T) {
	for _, f := range []string{"alerts.yaml", "dashboard.json"} {
		want, err := os.ReadFile(filepath.Join("../monitoring", f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(chartDir, "files", f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s/files/%s differs from deploy/monitoring/%s: cp deploy/monitoring/%s %s/files/", chartDir, f, f, f, chartDir)
		}
	}
	objs := render(t, values(t, "values-vllm.yaml"), KubeVersions[1])
	rule, ok := Of[*monitoringv1.PrometheusRule](objs)["tandem-alerts"]
	if !ok {
		t.Fatal("no PrometheusRule tandem-alerts")
	}
	var src struct {
		Groups []struct {
			Rules []map[string]any `json:"rules"`
		} `json:"groups"`
	}
	b, _ := os.ReadFile("../monitoring/alerts.yaml")
	if err := yaml.Unmarshal(b, &src); err != nil {
		t.Fatal(err)
	}
	if len(rule.Spec.Groups) != len(src.Groups) {
		t.Fatalf("PrometheusRule has %d groups, alerts.yaml %d", len(rule.Spec.Groups), len(src.Groups))
	}
	for i, g := range rule.Spec.Groups {
		if len(g.Rules) != len(src.Groups[i].Rules) || len(g.Rules) == 0 {
			t.Errorf("group %s: %d rules, alerts.yaml %d", g.Name, len(g.Rules), len(src.Groups[i].Rules))
		}
	}
}
