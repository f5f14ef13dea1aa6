package helm_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestChartTracing: tracing values reach the api-server and every pool as
// the standard OTEL_* variables (the pool named in the resource
// attributes, the headers from the Secret, never in a ConfigMap); off,
// no OTEL_* variable is set; enabled without an endpoint, or with a
// protocol the binaries refuse, the chart fails naming the value.
func TestChartTracing(t *testing.T) {
	t.Parallel()
	r := mustRender(t, map[string]any{"tracing": map[string]any{
		"enabled": true, "endpoint": "http://otel-collector.observability:4317", "protocol": "grpc",
		"sampler": "parentbased_traceidratio", "sampleRatio": 0.25, "captureContent": true,
		"resourceAttributes": map[string]any{"deployment.environment.name": "prod", "team": "a b"},
		"headersSecret":      map[string]any{"name": "otel-auth", "key": "headers"},
	}})
	want := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25",
		"OTEL_EXPORTER_OTLP_COMPRESSION": "gzip", "MANGO_OTEL_CAPTURE_CONTENT": "true",
		"OTEL_EXPORTER_OTLP_HEADERS": "secret:otel-auth/headers",
	}
	deployments := all[*appsv1.Deployment](r)
	if len(deployments) < 2 {
		t.Fatalf("%d Deployments rendered, want the api-server and a pool", len(deployments))
	}
	for _, d := range deployments {
		env := effectiveEnv(t, r, d.Spec.Template.Spec.Containers[0])
		for k, v := range want {
			if env[k] != v {
				t.Errorf("%s: %s = %q, want %q", d.Name, k, env[k], v)
			}
		}
		attrs := "deployment.environment.name=prod,team=a%20b"
		if d.Name != apiServerName {
			attrs = "deployment.environment.name=prod,mango.pool=local,team=a%20b"
		}
		if env["OTEL_RESOURCE_ATTRIBUTES"] != attrs {
			t.Errorf("%s: OTEL_RESOURCE_ATTRIBUTES = %q, want %q", d.Name, env["OTEL_RESOURCE_ATTRIBUTES"], attrs)
		}
	}
	for _, cm := range all[*corev1.ConfigMap](r) {
		for k := range cm.Data {
			if k == "OTEL_EXPORTER_OTLP_HEADERS" {
				t.Errorf("ConfigMap %s holds the exporter's headers; they belong in the Secret", cm.Name)
			}
		}
	}

	off := mustRender(t, nil)
	for _, d := range all[*appsv1.Deployment](off) {
		for k := range effectiveEnv(t, off, d.Spec.Template.Spec.Containers[0]) {
			if strings.HasPrefix(k, "OTEL_") || k == "MANGO_OTEL_CAPTURE_CONTENT" {
				t.Errorf("tracing off: %s has %s", d.Name, k)
			}
		}
	}

	for _, c := range []struct {
		vals map[string]any
		want string
	}{
		{map[string]any{"enabled": true}, "tracing.endpoint"},
		{map[string]any{"enabled": true, "endpoint": "http://c:4318", "protocol": "http/json"}, "protocol"},
		{map[string]any{"enabled": true, "endpoint": "collector:4318"}, "endpoint"},
		{map[string]any{"enabled": true, "endpoint": "http://c:4318", "sampleRatio": 2}, "sampleRatio"},
	} {
		if _, err := renderChart(map[string]any{"tracing": c.vals}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("tracing %v: err = %v, want one naming %s", c.vals, err, c.want)
		}
	}
}

// TestChartDashboard: grafana.dashboard.enabled ships the dashboard
// (dashboards/mango.json, byte for byte) in a ConfigMap with the label
// the Grafana sidecar watches and the folder annotation; off, none.
func TestChartDashboard(t *testing.T) {
	t.Parallel()
	file, err := os.ReadFile("mango/dashboards/mango.json")
	if err != nil {
		t.Fatal(err)
	}
	r := mustRender(t, map[string]any{"grafana": map[string]any{"dashboard": map[string]any{"enabled": true, "folder": "Agents"}}})
	cm := find[*corev1.ConfigMap](t, r, "mango-dashboard")
	if cm.Labels["grafana_dashboard"] != "1" || cm.Annotations["grafana_folder"] != "Agents" {
		t.Errorf("dashboard ConfigMap labels %v, annotations %v; want grafana_dashboard=1 and the folder", cm.Labels, cm.Annotations)
	}
	if got := cm.Data["mango.json"]; got != strings.TrimRight(string(file), "\n") {
		t.Errorf("the ConfigMap's dashboard differs from dashboards/mango.json (%d bytes, want %d)", len(got), len(file))
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(cm.Data["mango.json"]), &d); err != nil || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("the shipped dashboard is not a dashboard: uid %q, %d panels, %v", d.UID, len(d.Panels), err)
	}
	if has[*corev1.ConfigMap](mustRender(t, nil), "mango-dashboard") {
		t.Error("the dashboard ConfigMap is rendered by default")
	}
}
