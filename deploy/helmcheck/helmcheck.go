// Package helmcheck checks the Helm chart deploy/helm/tandem without a cluster:
// helm lint and helm template as Helm v4 runs them (its own packages, not a
// copy), every rendered object decoded strictly into its Kubernetes type, and
// the commands, ports, probes, Consul address and network policies the chart
// renders held to tandem's own flags and to each other. It is a module of its
// own (deploy/go.mod) so that Helm's and Kubernetes' dependencies never reach
// tandem's go.mod. The tests are the point; this file holds what they share.
package helmcheck

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"slices"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// Release and Namespace name the release the tests render.
const (
	Release   = "tandem"
	Namespace = "serving"
)

// KubeVersions are the ends of the Kubernetes minors the chart supports: its
// Chart.yaml kubeVersion floor (gRPC probes are GA from 1.27) and the release
// whose API types (k8s.io/api v0.37) the objects are decoded into.
var KubeVersions = []string{"1.27.0", "1.37.0"}

// Object is one rendered manifest and its typed form.
type Object struct {
	// Source is the template it came from, e.g. tandem/templates/router.yaml.
	Source string
	Kind   string
	Name   string
	Raw    string
	Obj    runtime.Object
	Hook   bool
}

// LoadValues reads values files and merges them as helm's -f does: later files
// win, maps merge key by key.
func LoadValues(files ...string) (map[string]any, error) {
	out := map[string]any{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = Merge(out, m)
	}
	return out, nil
}

// Merge returns b merged over a (helm's mergeMaps: maps merge, anything else is
// replaced).
func Merge(a, b map[string]any) map[string]any {
	out := maps.Clone(a)
	for k, v := range b {
		if bm, ok := v.(map[string]any); ok {
			if am, ok := out[k].(map[string]any); ok {
				out[k] = Merge(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// Lint runs helm lint's rules (lint.RunAll, what `helm lint` calls) with vals
// over the chart, for Kubernetes kube.
func Lint(chartDir string, vals map[string]any, kube string) ([]support.Message, error) {
	kv, err := common.ParseKubeVersion(kube)
	if err != nil {
		return nil, err
	}
	l := lint.RunAll(chartDir, vals, Namespace, lint.WithKubeVersion(kv))
	return l.Messages, nil
}

// Render renders the chart as `helm template` does (action.Install's client-only
// path: the kubeVersion constraint, dependencies, values coalesced and checked
// against values.schema.json, the engine, NOTES.txt set aside, manifests split
// and sorted into install order with hooks apart), and decodes every object
// strictly.
func Render(chartDir string, vals map[string]any, kube string) ([]Object, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	caps := common.DefaultCapabilities.Copy()
	kv, err := common.ParseKubeVersion(kube)
	if err != nil {
		return nil, err
	}
	caps.KubeVersion = *kv
	if c := ch.Metadata.KubeVersion; c != "" && !chartutil.IsCompatibleRange(c, caps.KubeVersion.String()) {
		return nil, fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s", c, caps.KubeVersion.Version)
	}
	if err := chartutil.ProcessDependencies(ch, vals); err != nil {
		return nil, err
	}
	opts := common.ReleaseOptions{Name: Release, Namespace: Namespace, Revision: 1, IsInstall: true}
	rv, err := util.ToRenderValuesWithSchemaValidation(ch, vals, opts, caps, false)
	if err != nil {
		return nil, err
	}
	var e engine.Engine
	files, err := e.RenderWithContext(context.Background(), ch, rv)
	if err != nil {
		return nil, err
	}
	for k := range files {
		if strings.HasSuffix(k, "NOTES.txt") || !strings.HasPrefix(k, path.Join(ch.Name(), "templates")+"/") {
			delete(files, k)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, caps.APIVersions, releaseutil.InstallOrder)
	if err != nil {
		return nil, err
	}
	var objs []Object
	var errs []error
	add := func(source, raw string, hook bool) {
		obj, err := Decode(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", source, err))
			return
		}
		kind := obj.GetObjectKind().GroupVersionKind().Kind
		name := ""
		if m, ok := obj.(interface{ GetName() string }); ok {
			name = m.GetName()
		}
		objs = append(objs, Object{Source: source, Kind: kind, Name: name, Raw: raw, Obj: obj, Hook: hook})
	}
	for _, m := range manifests {
		add(m.Name, m.Content, false)
	}
	for _, h := range hooks {
		add(h.Path, h.Manifest, true)
	}
	return objs, errors.Join(errs...)
}

var decoder = func() runtime.Decoder {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := monitoringv1.AddToScheme(s); err != nil {
		panic(err)
	}
	// EnableStrict: an unknown or duplicated field is an error, as the API
	// server's strict field validation (kubectl --validate=strict) makes it.
	return serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
}()

// Decode decodes one manifest into its registered Kubernetes type, strictly: an
// unknown kind or apiVersion, an unknown or duplicated field, or a value of the
// wrong type is an error.
func Decode(raw string) (runtime.Object, error) {
	obj, _, err := decoder.Decode([]byte(raw), nil, nil)
	if err != nil {
		return nil, err
	}
	return obj, nil
}

// lifecycle is what k8s.io/api's pre-release (alpha, beta) types say of the
// releases that serve them; GA types say nothing and are served until a major
// version ends.
type lifecycle interface {
	APILifecycleIntroduced() (major, minor int)
	APILifecycleRemoved() (major, minor int)
}

// Served says whether every Kubernetes minor from..to (1.x) serves obj's
// apiVersion: a beta API removed within the range, or introduced after its
// start, is an error naming the release.
func Served(obj runtime.Object, from, to int) error {
	l, ok := obj.(lifecycle)
	if !ok {
		return nil
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	if maj, min := l.APILifecycleIntroduced(); maj == 1 && min > from {
		return fmt.Errorf("%s %s is served from Kubernetes 1.%d, after 1.%d", gvk.GroupVersion(), gvk.Kind, min, from)
	}
	if maj, min := l.APILifecycleRemoved(); maj == 1 && min <= to {
		return fmt.Errorf("%s %s is no longer served from Kubernetes 1.%d", gvk.GroupVersion(), gvk.Kind, min)
	}
	return nil
}

// Of returns the objects of type T, by name.
func Of[T runtime.Object](objs []Object) map[string]T {
	out := map[string]T{}
	for _, o := range objs {
		if t, ok := o.Obj.(T); ok {
			out[o.Name] = t
		}
	}
	return out
}

// Kinds lists the objects as kind/name, sorted, for messages.
func Kinds(objs []Object) []string {
	var s []string
	for _, o := range objs {
		s = append(s, o.Kind+"/"+o.Name)
	}
	slices.Sort(s)
	return s
}
