package helmcheck

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// roles are tandem's services, each a Deployment named Release-role.
var roles = []string{"frontend", "router", "prefill", "decode"}

// selects says whether sel selects a pod with these labels.
func selects(t *testing.T, sel *metav1.LabelSelector, l map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatalf("selector %v: %v", sel, err)
	}
	return !s.Empty() && s.Matches(labels.Set(l))
}

// selected are the Deployments whose pods sel selects.
func selected(t *testing.T, deps map[string]*appsv1.Deployment, sel *metav1.LabelSelector) []*appsv1.Deployment {
	var out []*appsv1.Deployment
	for _, d := range deps {
		if selects(t, sel, d.Spec.Template.Labels) {
			out = append(out, d)
		}
	}
	return out
}

// hasPort says whether a container of the pod has a port of that name or number.
func hasPort(p corev1.PodSpec, port string) bool {
	for _, c := range p.Containers {
		for _, cp := range c.Ports {
			if cp.Name == port || strconv.Itoa(int(cp.ContainerPort)) == port {
				return true
			}
		}
	}
	return false
}

// TestObjectsFitTogether: the rendered objects refer to each other correctly:
// names and labels Kubernetes accepts, selectors that select the pods meant,
// Service and ServiceMonitor ports that exist, probes on ports the containers
// have, budgets over real pods.
func TestObjectsFitTogether(t *testing.T) {
	for _, f := range valuesFiles {
		for _, kube := range KubeVersions {
			t.Run(f+"@"+kube, func(t *testing.T) {
				objs := render(t, values(t, f), kube)
				deps := Of[*appsv1.Deployment](objs)
				svcs := Of[*corev1.Service](objs)
				for _, o := range objs {
					m := o.Obj.(metav1.Object)
					for _, e := range validation.IsDNS1123Subdomain(m.GetName()) {
						t.Errorf("%s/%s: name: %s", o.Kind, o.Name, e)
					}
					for k, v := range m.GetLabels() {
						for _, e := range append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...) {
							t.Errorf("%s/%s: label %s=%s: %s", o.Kind, o.Name, k, v, e)
						}
					}
				}
				for name, d := range deps {
					if !selects(t, d.Spec.Selector, d.Spec.Template.Labels) {
						t.Errorf("Deployment/%s: its selector does not select its own pods", name)
					}
					for _, c := range append(d.Spec.Template.Spec.InitContainers, d.Spec.Template.Spec.Containers...) {
						checkContainerPorts(t, "Deployment/"+name+" "+c.Name, c)
					}
				}
				for name, s := range svcs {
					for _, e := range validation.IsDNS1035Label(name) {
						t.Errorf("Service/%s: %s", name, e)
					}
					sel := &metav1.LabelSelector{MatchLabels: s.Spec.Selector}
					ds := selected(t, deps, sel)
					if len(ds) != 1 {
						t.Errorf("Service/%s selects %d Deployments' pods, want 1", name, len(ds))
						continue
					}
					for _, p := range s.Spec.Ports {
						if !hasPort(ds[0].Spec.Template.Spec, p.TargetPort.String()) {
							t.Errorf("Service/%s port %s: target port %s is no port of Deployment/%s", name, p.Name, p.TargetPort.String(), ds[0].Name)
						}
					}
				}
				for name, b := range Of[*policyv1.PodDisruptionBudget](objs) {
					if ds := selected(t, deps, b.Spec.Selector); len(ds) != 1 {
						t.Errorf("PodDisruptionBudget/%s selects %d Deployments' pods, want 1", name, len(ds))
					}
				}
				for name, m := range Of[*monitoringv1.ServiceMonitor](objs) {
					var match []*corev1.Service
					for _, s := range svcs {
						if selects(t, &m.Spec.Selector, s.Labels) {
							match = append(match, s)
						}
					}
					if len(match) != 1 {
						t.Errorf("ServiceMonitor/%s selects %d Services, want 1", name, len(match))
						continue
					}
					s := match[0]
					if job := s.Labels[m.Spec.JobLabel]; !strings.HasPrefix(job, "tandem") {
						t.Errorf("ServiceMonitor/%s: job label %s of Service/%s is %q: deploy/monitoring/alerts.yaml expects jobs named tandem...", name, m.Spec.JobLabel, s.Name, job)
					}
					for _, ep := range m.Spec.Endpoints {
						found := false
						for _, p := range s.Spec.Ports {
							found = found || p.Name == ep.Port
						}
						if !found || ep.Path != "/metrics" {
							t.Errorf("ServiceMonitor/%s: endpoint port %q path %q: Service/%s has no such port, or the path is not /metrics", name, ep.Port, ep.Path, s.Name)
						}
					}
				}
			})
		}
	}
}

func checkContainerPorts(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	seen := map[string]bool{}
	for _, p := range c.Ports {
		for _, e := range validation.IsValidPortName(p.Name) {
			t.Errorf("%s: port name %q: %s", where, p.Name, e)
		}
		if seen[p.Name] {
			t.Errorf("%s: port name %q twice", where, p.Name)
		}
		seen[p.Name] = true
	}
	for kind, pr := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
		if pr == nil {
			continue
		}
		var port string
		switch {
		case pr.HTTPGet != nil:
			port = pr.HTTPGet.Port.String()
		case pr.TCPSocket != nil:
			port = pr.TCPSocket.Port.String()
		case pr.GRPC != nil:
			port = strconv.Itoa(int(pr.GRPC.Port))
		default:
			continue
		}
		if !hasPort(corev1.PodSpec{Containers: []corev1.Container{c}}, port) {
			t.Errorf("%s: %s probe on port %s, which the container does not declare", where, kind, port)
		}
	}
}

// portOf is the port of a host:port.
func portOf(t *testing.T, where, hostport string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	n, err2 := strconv.Atoi(p)
	if err != nil || err2 != nil {
		t.Errorf("%s: %q is not host:port", where, hostport)
	}
	return int32(n)
}

// tandemContainer is a Deployment's tandem container, with its command line and
// environment as the kubelet would start it.
type tandemContainer struct {
	dep   *appsv1.Deployment
	c     corev1.Container
	role  string
	args  []string
	env   map[string]string
	flags map[string]string
}

func tandemContainers(t *testing.T, objs []Object, vals map[string]any) []tandemContainer {
	t.Helper()
	return tandemContainersIn(t, objs, vals, func(string) map[string]string { return Downward })
}

// tandemContainersIn is tandemContainers with each Deployment's pod given its
// own downward API fields.
func tandemContainersIn(t *testing.T, objs []Object, vals map[string]any, downward func(dep string) map[string]string) []tandemContainer {
	t.Helper()
	image := fmt.Sprint(dig(vals, "image", "repository")) + ":" + fmt.Sprint(dig(vals, "image", "tag"))
	var out []tandemContainer
	for _, d := range Of[*appsv1.Deployment](objs) {
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Image != image || len(c.Command) > 0 {
				continue // another program (vLLM, the Consul dev agent)
			}
			env, err := EnvIn(c, downward(d.Name))
			if err != nil {
				t.Fatalf("Deployment/%s: %v", d.Name, err)
			}
			var args []string
			for _, a := range c.Args {
				args = append(args, Expand(a, env))
			}
			for _, a := range args {
				if varRef.MatchString(a) {
					t.Errorf("Deployment/%s: %q refers to a variable the container does not define", d.Name, a)
				}
			}
			out = append(out, tandemContainer{dep: d, c: c, role: args[0], args: args, env: env, flags: Flags(args[1:])})
		}
	}
	return out
}

// dig reads a nested key of the coalesced values (the chart's defaults under
// vals): vals first, then values.yaml.
func dig(vals map[string]any, keys ...string) any {
	for _, m := range []map[string]any{vals, defaults} {
		var cur any = m
		for _, k := range keys {
			mm, ok := cur.(map[string]any)
			if !ok {
				cur = nil
				break
			}
			cur = mm[k]
		}
		if cur != nil {
			return cur
		}
	}
	return nil
}

var defaults = func() map[string]any {
	v, err := LoadValues(chartDir + "/values.yaml")
	if err != nil {
		panic(err)
	}
	return v
}()

// TestCommandsAgreeWithPods: each tandem container's flags agree with its pod:
// it listens on the port the pod declares and the probes and Services use, it
// registers the pod's own address, it reaches the Consul agent the values name
// (and that agent exists, for the dev agent), its token file is the role's key
// of the Secret named, a prefill worker's KV port is declared, and every file a
// flag names lies on a volume the container mounts.
func TestCommandsAgreeWithPods(t *testing.T) {
	for _, f := range valuesFiles {
		for _, kube := range KubeVersions {
			t.Run(f+"@"+kube, func(t *testing.T) {
				vals := values(t, f)
				objs := render(t, vals, kube)
				tcs := tandemContainers(t, objs, vals)
				seen := map[string]bool{}
				for _, tc := range tcs {
					seen[tc.role] = true
					checkCommand(t, objs, vals, tc)
				}
				for _, r := range roles {
					if !seen[r] {
						t.Errorf("no tandem container runs %s", r)
					}
				}
			})
		}
	}
}

func checkCommand(t *testing.T, objs []Object, vals map[string]any, tc tandemContainer) {
	t.Helper()
	where := "Deployment/" + tc.dep.Name + " (" + tc.role + ")"
	if want := Release + "-" + tc.role; tc.dep.Name != want {
		t.Errorf("%s runs tandem %s, want it in Deployment/%s", where, tc.role, want)
	}
	portName := "grpc"
	if tc.role == "frontend" {
		portName = "http"
	}
	port, ok := PortNamed(tc.c, portName)
	if !ok {
		t.Fatalf("%s: no container port %q", where, portName)
	}
	if p := portOf(t, where+" --listen", tc.flags["listen"]); p != port {
		t.Errorf("%s: --listen %s, but the container's %s port is %d", where, tc.flags["listen"], portName, port)
	}
	if want := net.JoinHostPort(Downward["status.podIP"], strconv.Itoa(int(port))); tc.flags["advertise"] != want {
		t.Errorf("%s: --advertise %q, want the pod's address %s", where, tc.flags["advertise"], want)
	}

	// Probes: the frontend's /healthz and /readyz, the router's gRPC health, a
	// worker's /readyz, all on the port the service listens on.
	rp := tc.c.ReadinessProbe
	switch tc.role {
	case "router":
		if rp == nil || rp.GRPC == nil || rp.GRPC.Port != port {
			t.Errorf("%s: readiness should be grpc.health.v1 on port %d: %+v", where, port, rp)
		}
	default:
		if rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/readyz" || rp.HTTPGet.Port.String() != portName {
			t.Errorf("%s: readiness should be GET /readyz on %s: %+v", where, portName, rp)
		}
	}
	if tc.role == "frontend" {
		if lp := tc.c.LivenessProbe; lp == nil || lp.HTTPGet == nil || lp.HTTPGet.Path != "/healthz" {
			t.Errorf("%s: liveness should be GET /healthz: %+v", where, lp)
		}
	}

	// Consul.
	consul := tc.flags["consul"]
	switch {
	case dig(vals, "consul", "hostAgent") == true:
		want := net.JoinHostPort(Downward["status.hostIP"], fmt.Sprint(dig(vals, "consul", "hostAgentPort")))
		if consul != want {
			t.Errorf("%s: --consul %q, want the node's agent %s", where, consul, want)
		}
	case dig(vals, "consul", "devAgent", "enabled") == true:
		host, p, _ := net.SplitHostPort(consul)
		s, ok := Of[*corev1.Service](objs)[host]
		if !ok || len(s.Spec.Ports) != 1 || strconv.Itoa(int(s.Spec.Ports[0].Port)) != p {
			t.Errorf("%s: --consul %q is no Service of the release with that port", where, consul)
		} else if d, ok := Of[*appsv1.Deployment](objs)[host]; !ok || !hasPort(d.Spec.Template.Spec, s.Spec.Ports[0].TargetPort.String()) {
			t.Errorf("%s: --consul %q: Service/%s leads to no Consul agent's port", where, consul, host)
		}
	default:
		if want := fmt.Sprint(dig(vals, "consul", "address")); consul != want {
			t.Errorf("%s: --consul %q, want %s", where, consul, want)
		}
	}
	if secret := fmt.Sprint(dig(vals, "consul", "acl", "secretName")); secret != "" && secret != "<nil>" {
		checkTokenFile(t, where, tc, secret, fmt.Sprint(dig(vals, "consul", "acl", "keys", tc.role)))
	} else if _, ok := tc.flags["consul-token-file"]; ok {
		t.Errorf("%s: --consul-token-file without consul.acl.secretName", where)
	}
	for _, a := range tc.c.Args {
		if strings.Contains(strings.ToLower(a), "token=") && !strings.HasPrefix(a, "--consul-token-file=") {
			t.Errorf("%s: a token on the command line: %q", where, a)
		}
	}

	if tc.role == "prefill" {
		kv, ok := PortNamed(tc.c, "kv")
		if !ok || portOf(t, where+" --kv-listen", tc.flags["kv-listen"]) != kv {
			t.Errorf("%s: --kv-listen %q, but the container's kv port is %d", where, tc.flags["kv-listen"], kv)
		}
	}

	// Every file the command names is on a volume of the container.
	for k, v := range tc.flags {
		if strings.HasPrefix(v, "/") {
			if _, ok := MountOf(tc.c, v); !ok {
				t.Errorf("%s: --%s %s is on no volume the container mounts: the file will not be there", where, k, v)
			}
		}
	}
	for k, v := range tc.env {
		if strings.HasPrefix(v, "/") {
			if _, ok := MountOf(tc.c, v); !ok {
				t.Errorf("%s: %s=%s is on no volume the container mounts", where, k, v)
			}
		}
	}
}

func checkTokenFile(t *testing.T, where string, tc tandemContainer, secret, key string) {
	t.Helper()
	path := tc.flags["consul-token-file"]
	if path == "" {
		t.Errorf("%s: consul.acl.secretName is %s but no --consul-token-file", where, secret)
		return
	}
	m, ok := MountOf(tc.c, path)
	if !ok {
		t.Errorf("%s: --consul-token-file %s is on no mounted volume", where, path)
		return
	}
	v, ok := VolumeNamed(tc.dep.Spec.Template.Spec, m.Name)
	if !ok || v.Secret == nil || v.Secret.SecretName != secret {
		t.Errorf("%s: --consul-token-file %s is not on Secret %s", where, path, secret)
		return
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(path, m.MountPath), "/")
	for _, it := range v.Secret.Items {
		if it.Path == rel {
			if it.Key != key {
				t.Errorf("%s: the token file is Secret %s's key %s, want the role's key %s", where, secret, it.Key, key)
			}
			return
		}
	}
	t.Errorf("%s: Secret volume %s puts no item at %s", where, m.Name, rel)
}

// TestConsulTLS: with the agent's HTTPS API, every tandem container gets
// CONSUL_HTTP_SSL and a CONSUL_CACERT that is the named key of the CA Secret,
// mounted, and the agent's port the values give.
func TestConsulTLS(t *testing.T) {
	vals := map[string]any{"consul": map[string]any{"hostAgentPort": 8501, "tls": map[string]any{"enabled": true, "caSecret": "consul-ca-cert"}}}
	objs := render(t, vals, KubeVersions[1])
	tcs := tandemContainers(t, objs, vals)
	if len(tcs) != len(roles) {
		t.Fatalf("%d tandem containers, want %d", len(tcs), len(roles))
	}
	for _, tc := range tcs {
		where := "Deployment/" + tc.dep.Name
		checkCommand(t, objs, vals, tc)
		if tc.env["CONSUL_HTTP_SSL"] != "true" {
			t.Errorf("%s: CONSUL_HTTP_SSL %q", where, tc.env["CONSUL_HTTP_SSL"])
		}
		ca := tc.env["CONSUL_CACERT"]
		m, ok := MountOf(tc.c, ca)
		if !ok {
			t.Fatalf("%s: CONSUL_CACERT %q on no volume", where, ca)
		}
		v, _ := VolumeNamed(tc.dep.Spec.Template.Spec, m.Name)
		if v.Secret == nil || v.Secret.SecretName != "consul-ca-cert" || len(v.Secret.Items) != 1 ||
			v.Secret.Items[0].Key != "tls.crt" || m.MountPath+"/"+v.Secret.Items[0].Path != ca {
			t.Errorf("%s: CONSUL_CACERT %s is not Secret consul-ca-cert's tls.crt: %+v", where, ca, v.Secret)
		}
	}
}
