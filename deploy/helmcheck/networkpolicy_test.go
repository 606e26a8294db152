package helmcheck

import (
	"reflect"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// source is where a connection comes from: a pod of the release (its labels),
// or a peer from values (Consul, Prometheus), matched as written.
type source struct {
	name   string
	labels map[string]string
	peer   *networkingv1.NetworkPolicyPeer
}

// admits says whether the policies let src reach port (a name or number) of a
// pod of d, with Kubernetes' semantics: a pod no policy selects admits
// everything; otherwise some rule of a policy selecting it must admit both the
// port and the source.
func admits(t *testing.T, pols map[string]*networkingv1.NetworkPolicy, d *appsv1.Deployment, src source, port string) bool {
	t.Helper()
	podLabels := d.Spec.Template.Labels
	num := port
	if n, ok := namedPort(d.Spec.Template.Spec, port); ok {
		num = strconv.Itoa(int(n))
	}
	selected := false
	for _, p := range pols {
		if !selects(t, &p.Spec.PodSelector, podLabels) {
			continue
		}
		selected = true
		for _, r := range p.Spec.Ingress {
			portOK := len(r.Ports) == 0
			for _, rp := range r.Ports {
				portOK = portOK || rp.Port == nil || rp.Port.String() == port || rp.Port.String() == num
			}
			fromOK := len(r.From) == 0
			for _, f := range r.From {
				switch {
				case src.peer != nil:
					fromOK = fromOK || reflect.DeepEqual(f, *src.peer)
				case f.PodSelector != nil && f.NamespaceSelector == nil && f.IPBlock == nil:
					fromOK = fromOK || selects(t, f.PodSelector, src.labels)
				}
			}
			if portOK && fromOK {
				return true
			}
		}
	}
	return !selected
}

func namedPort(p corev1.PodSpec, name string) (int32, bool) {
	for _, c := range p.Containers {
		if n, ok := PortNamed(c, name); ok {
			return n, true
		}
	}
	return 0, false
}

// TestNetworkPolicies: the policies admit exactly the paths the suite uses:
// clients to the frontend; the frontends to the router and the workers; the
// routers to the workers; the decode workers to the prefill workers' ports, KV
// port included; Consul's checks and Prometheus's scrapes to every service's
// port; and nothing else: no worker or client reaches the router, nothing but a
// decode worker reaches the KV port.
func TestNetworkPolicies(t *testing.T) {
	for _, f := range valuesFiles {
		t.Run(f, func(t *testing.T) {
			vals := values(t, f)
			objs := render(t, vals, KubeVersions[1])
			pols := Of[*networkingv1.NetworkPolicy](objs)
			deps := Of[*appsv1.Deployment](objs)
			dep := func(role string) *appsv1.Deployment {
				d, ok := deps[Release+"-"+role]
				if !ok {
					t.Fatalf("no Deployment %s-%s", Release, role)
				}
				return d
			}
			pod := func(role string) source {
				return source{name: role, labels: dep(role).Spec.Template.Labels}
			}
			client := source{name: "a client", labels: map[string]string{"app": "curl"}}
			var consulPeers, promPeers []source
			for _, p := range peersOf(t, vals, "consul") {
				consulPeers = append(consulPeers, source{name: "Consul", peer: p})
			}
			for _, p := range peersOf(t, vals, "prometheus") {
				promPeers = append(promPeers, source{name: "Prometheus", peer: p})
			}
			if dig(vals, "consul", "devAgent", "enabled") == true {
				consulPeers = append(consulPeers, pod("consul"))
			}
			type flow struct {
				from source
				to   string
				port string
				want bool
			}
			flows := []flow{
				{client, "frontend", "http", true},
				{pod("frontend"), "router", "grpc", true},
				{pod("frontend"), "decode", "grpc", true},
				{pod("frontend"), "prefill", "grpc", true},
				{pod("router"), "decode", "grpc", true},
				{pod("router"), "prefill", "grpc", true},
				{pod("decode"), "prefill", "grpc", true},
				{pod("decode"), "prefill", "kv", true},
				{client, "router", "grpc", false},
				{client, "decode", "grpc", false},
				{client, "prefill", "kv", false},
				{pod("prefill"), "router", "grpc", false},
				{pod("decode"), "router", "grpc", false},
				{pod("frontend"), "prefill", "kv", false},
				{pod("router"), "prefill", "kv", false},
			}
			gpu := dig(vals, "engine", "kind") == "vllm"
			if !gpu {
				flows = append(flows, flow{pod("prefill"), "decode", "grpc", false})
			} else {
				// NIXL's side channel and UCX's ports, between the vLLM servers.
				flows = append(flows, flow{pod("prefill"), "decode", "nixl", true}, flow{pod("decode"), "prefill", "nixl", true},
					flow{pod("decode"), "prefill", "40000", true}, flow{client, "decode", "nixl", false})
			}
			for _, r := range roles {
				port := "grpc"
				if r == "frontend" {
					port = "http"
				}
				for _, s := range append(consulPeers, promPeers...) {
					flows = append(flows, flow{s, r, port, true})
				}
				if gpu && r != "frontend" && r != "router" {
					for _, s := range promPeers {
						flows = append(flows, flow{s, r, "engine", true})
					}
				}
			}
			if len(consulPeers) == 0 || len(promPeers) == 0 {
				t.Fatal("no Consul or Prometheus peers in the values")
			}
			for _, fl := range flows {
				if got := admits(t, pols, dep(fl.to), fl.from, fl.port); got != fl.want {
					t.Errorf("%s -> %s port %s: admitted %v, want %v", fl.from.name, fl.to, fl.port, got, fl.want)
				}
			}
			// Every policy selects pods of the release, on ports they have.
			for name, p := range pols {
				var ds []*appsv1.Deployment
				for _, d := range deps {
					if selects(t, &p.Spec.PodSelector, d.Spec.Template.Labels) {
						ds = append(ds, d)
					}
				}
				if len(ds) == 0 {
					t.Errorf("NetworkPolicy/%s selects no pod", name)
				}
				for _, r := range p.Spec.Ingress {
					for _, rp := range r.Ports {
						for _, d := range ds {
							if rp.Port != nil && !hasPort(d.Spec.Template.Spec, rp.Port.String()) {
								t.Errorf("NetworkPolicy/%s admits port %s, which Deployment/%s does not have", name, rp.Port.String(), d.Name)
							}
						}
					}
					for _, fr := range r.From {
						if fr.PodSelector == nil || fr.NamespaceSelector != nil {
							continue
						}
						n := 0
						for _, d := range deps {
							if selects(t, fr.PodSelector, d.Spec.Template.Labels) {
								n++
							}
						}
						if n == 0 {
							t.Errorf("NetworkPolicy/%s admits pods %v, which the release does not run", name, fr.PodSelector.MatchLabels)
						}
					}
				}
			}
		})
	}
}

// peersOf reads networkPolicy.<key> from the values as NetworkPolicyPeers.
func peersOf(t *testing.T, vals map[string]any, key string) []*networkingv1.NetworkPolicyPeer {
	t.Helper()
	raw, _ := dig(vals, "networkPolicy", key).([]any)
	var out []*networkingv1.NetworkPolicyPeer
	for _, r := range raw {
		var p networkingv1.NetworkPolicyPeer
		if err := fromMap(r, &p); err != nil {
			t.Fatalf("networkPolicy.%s: %v", key, err)
		}
		out = append(out, &p)
	}
	return out
}
