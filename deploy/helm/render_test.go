package helm_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// chartDir is the chart under test.
const chartDir = "mango"

// Release name and namespace of every render.
const (
	releaseName      = "mango"
	releaseNamespace = "agents"
)

// kubeVersion is the cluster version renders and lint assume (the test
// binary has no client-go build info, so Helm would assume v1.20).
var kubeVersion = &chartutil.KubeVersion{Version: "v1.33.0", Major: "1", Minor: "33"}

// serviceMonitor is the part of a monitoring.coreos.com/v1 ServiceMonitor
// the chart emits; decoding rejects any other field.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval,omitempty"`
			ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// kinds maps "apiVersion kind" to a new typed object. A rendered kind that
// is missing here fails the test.
var kinds = map[string]func() any{
	"v1 ConfigMap":                             func() any { return &corev1.ConfigMap{} },
	"v1 Secret":                                func() any { return &corev1.Secret{} },
	"v1 Service":                               func() any { return &corev1.Service{} },
	"v1 ServiceAccount":                        func() any { return &corev1.ServiceAccount{} },
	"apps/v1 Deployment":                       func() any { return &appsv1.Deployment{} },
	"batch/v1 Job":                             func() any { return &batchv1.Job{} },
	"autoscaling/v2 HorizontalPodAutoscaler":   func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
	"policy/v1 PodDisruptionBudget":            func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1 Ingress":             func() any { return &networkingv1.Ingress{} },
	"networking.k8s.io/v1 NetworkPolicy":       func() any { return &networkingv1.NetworkPolicy{} },
	"rbac.authorization.k8s.io/v1 Role":        func() any { return &rbacv1.Role{} },
	"rbac.authorization.k8s.io/v1 RoleBinding": func() any { return &rbacv1.RoleBinding{} },
	"monitoring.coreos.com/v1 ServiceMonitor":  func() any { return &serviceMonitor{} },
}

// object is one rendered document, decoded.
type object struct {
	Source string // template path
	Kind   string
	Name   string
	Hook   bool // a Helm hook
	Obj    any  // the typed object from kinds
}

// rendered is the output of one dry-run install.
type rendered struct {
	Objects []object
	Notes   string
}

// valuesFile reads a values file of the chart (relative to chartDir).
func valuesFile(t *testing.T, name string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValuesFile(filepath.Join(chartDir, name))
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return v
}

// mergeValues returns base with over merged into it recursively (maps
// merge, everything else is replaced), like successive -f files.
func mergeValues(base, over map[string]any) map[string]any {
	out := maps.Clone(base)
	if out == nil {
		out = map[string]any{}
	}
	for k, v := range over {
		if vm, ok := v.(map[string]any); ok {
			if bm, ok := out[k].(map[string]any); ok {
				out[k] = mergeValues(bm, vm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// yamlValues parses values written inline in a test.
func yamlValues(t *testing.T, s string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := yaml.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("values %q: %v", s, err)
	}
	return v
}

// renderChart renders the chart as `helm install --dry-run` does, hooks and
// NOTES included. It returns Helm's error (schema, template fail) as is.
func renderChart(vals map[string]any) (*rendered, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return nil, fmt.Errorf("load chart: %w", err)
	}
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.DryRun = true
	inst.DryRunOption = "client"
	inst.ClientOnly = true
	inst.IncludeCRDs = true
	inst.Replace = true
	inst.ReleaseName = releaseName
	inst.Namespace = releaseNamespace
	inst.KubeVersion = kubeVersion
	rel, err := inst.Run(chrt, vals)
	if err != nil {
		return nil, err
	}
	out := &rendered{Notes: rel.Info.Notes}
	docs, err := decodeManifests(rel.Manifest, false)
	if err != nil {
		return nil, err
	}
	out.Objects = docs
	for _, h := range rel.Hooks {
		docs, err := decodeManifests(h.Manifest, true)
		if err != nil {
			return nil, fmt.Errorf("hook %s: %w", h.Path, err)
		}
		if len(docs) != 1 {
			return nil, fmt.Errorf("hook %s: %d documents, want 1", h.Path, len(docs))
		}
		docs[0].Source = h.Path
		out.Objects = append(out.Objects, docs...)
	}
	return out, nil
}

// mustRender renders and fails the test on any error.
func mustRender(t *testing.T, vals map[string]any) *rendered {
	t.Helper()
	r, err := renderChart(vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return r
}

// decodeManifests splits a multi-document manifest and decodes every
// document strictly into its Kubernetes type.
func decodeManifests(manifest string, hook bool) ([]object, error) {
	var out []object
	for _, doc := range strings.Split(manifest, "\n---") {
		source := ""
		for _, line := range strings.Split(doc, "\n") {
			if s, ok := strings.CutPrefix(line, "# Source: "); ok {
				source = s
			}
		}
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		o, err := decodeStrict([]byte(doc))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
		o.Source, o.Hook = source, hook
		out = append(out, o)
	}
	return out, nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// decodeStrict decodes one YAML document into the type of its kind; a
// duplicate key, an unknown field or an unknown kind is an error.
func decodeStrict(doc []byte) (object, error) {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return object{}, fmt.Errorf("yaml: %w", err)
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return object{}, fmt.Errorf("type meta: %w", err)
	}
	newObj, ok := kinds[tm.APIVersion+" "+tm.Kind]
	if !ok {
		return object{}, fmt.Errorf("unexpected kind %q %q (known: %s)", tm.APIVersion, tm.Kind, strings.Join(slices.Sorted(maps.Keys(kinds)), ", "))
	}
	obj := newObj()
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		return object{}, fmt.Errorf("%s: strict decode: %w", tm.Kind, err)
	}
	meta, ok := obj.(metav1.ObjectMetaAccessor)
	if !ok {
		return object{}, fmt.Errorf("%s: no metadata", tm.Kind)
	}
	return object{Kind: tm.Kind, Name: meta.GetObjectMeta().GetName(), Obj: obj}, nil
}

// all returns the objects of type T.
func all[T any](r *rendered) []T {
	var out []T
	for _, o := range r.Objects {
		if v, ok := o.Obj.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// find returns the object of type T named name, failing the test without one.
func find[T metav1.Object](t *testing.T, r *rendered, name string) T {
	t.Helper()
	var names []string
	for _, v := range all[T](r) {
		if v.GetName() == name {
			return v
		}
		names = append(names, v.GetName())
	}
	var zero T
	t.Fatalf("no %T named %q (have %v)", zero, name, names)
	return zero
}

// has reports whether an object of type T named name was rendered.
func has[T metav1.Object](r *rendered, name string) bool {
	for _, v := range all[T](r) {
		if v.GetName() == name {
			return true
		}
	}
	return false
}

// effectiveEnv is a container's environment as the kubelet builds it:
// the ConfigMaps of envFrom (from the render), then env. Values from
// secrets are reported as "secret:<name>/<key>".
func effectiveEnv(t *testing.T, r *rendered, c corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef != nil {
			if !has[*corev1.ConfigMap](r, ef.ConfigMapRef.Name) {
				continue // an operator's ConfigMap
			}
			cm := find[*corev1.ConfigMap](t, r, ef.ConfigMapRef.Name)
			for k, v := range cm.Data {
				env[ef.Prefix+k] = v
			}
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = "secret:" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		default:
			env[e.Name] = "valueFrom"
		}
	}
	return env
}

// ciValuesFiles lists ci/*-values.yaml.
func ciValuesFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no ci values files (%v)", err)
	}
	for i, f := range files {
		files[i] = filepath.Join("ci", filepath.Base(f))
	}
	return files
}
