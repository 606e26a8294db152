package helmcheck

import (
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Downward is what the tests take the downward API's fields to be in a pod.
var Downward = map[string]string{
	"metadata.name": "tandem-decode-5d8f7c9b4-x2x7q",
	"status.podIP":  "10.244.1.17",
	"status.hostIP": "172.18.0.3",
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// Env is a container's environment as the kubelet makes it: values with $(VAR)
// expanded from the variables before them, fields from Downward, and secretKeyRef
// and configMapKeyRef values as placeholders (their content is the cluster's).
func Env(c corev1.Container) (map[string]string, error) { return EnvIn(c, Downward) }

// EnvIn is Env with the downward API's fields given.
func EnvIn(c corev1.Container, downward map[string]string) (map[string]string, error) {
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = Expand(e.Value, env)
		case e.ValueFrom.FieldRef != nil:
			v, ok := downward[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				return nil, fmt.Errorf("env %s: no test value for field %s", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			env[e.Name] = v
		case e.ValueFrom.SecretKeyRef != nil, e.ValueFrom.ConfigMapKeyRef != nil:
			env[e.Name] = "from-the-cluster"
		default:
			return nil, fmt.Errorf("env %s: a source the tests do not model", e.Name)
		}
	}
	return env, nil
}

// Expand replaces $(VAR) with VAR's value where it is defined, as the kubelet
// does in env values, command and args; an undefined reference stays as it is.
func Expand(s string, env map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := env[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// Flags are a tandem command line's --name=value flags (a bare --name is "true").
func Flags(args []string) map[string]string {
	f := map[string]string{}
	for _, a := range args {
		name, ok := strings.CutPrefix(a, "--")
		if !ok {
			continue
		}
		k, v, found := strings.Cut(name, "=")
		if !found {
			v = "true"
		}
		f[k] = v
	}
	return f
}

// PortNamed is the container's port of that name.
func PortNamed(c corev1.Container, name string) (int32, bool) {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

// MountOf is the container's volume mount holding path, the longest that does.
func MountOf(c corev1.Container, path string) (corev1.VolumeMount, bool) {
	var best corev1.VolumeMount
	found := false
	for _, m := range c.VolumeMounts {
		if (path == m.MountPath || strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")) && len(m.MountPath) >= len(best.MountPath) {
			best, found = m, true
		}
	}
	return best, found
}

// VolumeNamed is the pod's volume of that name.
func VolumeNamed(p corev1.PodSpec, name string) (corev1.Volume, bool) {
	for _, v := range p.Volumes {
		if v.Name == name {
			return v, true
		}
	}
	return corev1.Volume{}, false
}

// fromMap decodes a value read from YAML into a typed struct, strictly.
func fromMap(v any, out any) error {
	b, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	return yaml.UnmarshalStrict(b, out)
}
