package helm_test

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Names the chart gives the api-server's objects for release "mango".
const (
	apiServerName  = "mango-api-server"
	workerLabelKey = "app.kubernetes.io/component"
	workerLabelVal = "execution-worker"
)

// k8sRBAC is everything the k8s sandbox provider may be granted
// (execution-worker/sandbox/sandboxk8s: dynamic client get, list, create
// and delete on one kind; data plane through the router).
var k8sRBAC = map[string]string{
	"agents.x-k8s.io":            "sandboxes",
	"extensions.agents.x-k8s.io": "sandboxclaims",
}

var k8sVerbs = []string{"get", "list", "create", "delete"}

// testName names the subtest of a values file ("" is the defaults).
func testName(file string) string {
	if file == "" {
		return "defaults"
	}
	return strings.TrimSuffix(strings.TrimPrefix(file, "ci/"), "-values.yaml")
}

// chartValues returns the chart's default values with the ci file (if
// any) merged over them, as Helm merges them.
func chartValues(t *testing.T, file string) (defaults, override map[string]any) {
	t.Helper()
	defaults = valuesFile(t, "values.yaml")
	override = map[string]any{}
	if file != "" {
		override = valuesFile(t, file)
	}
	return defaults, override
}

// pool is a worker pool as the values describe it.
type pool struct {
	Name, Provider string
	Values         map[string]any // the pool's own entry
}

// expectedPools lists the enabled pools of the merged values.
func expectedPools(t *testing.T, vals map[string]any) []pool {
	t.Helper()
	defEnabled := true
	if wd, ok := vals["workerDefaults"].(map[string]any); ok {
		if e, ok := wd["enabled"].(bool); ok {
			defEnabled = e
		}
	}
	var out []pool
	list, _ := vals["workerPools"].([]any)
	for _, raw := range list {
		p := raw.(map[string]any)
		enabled := defEnabled
		if e, ok := p["enabled"].(bool); ok {
			enabled = e
		}
		if enabled {
			out = append(out, pool{Name: p["name"].(string), Provider: p["provider"].(string), Values: p})
		}
	}
	return out
}

func TestChartLint(t *testing.T) {
	t.Parallel()
	files := append([]string{""}, ciValuesFiles(t)...)
	for _, file := range files {
		t.Run(testName(file), func(t *testing.T) {
			t.Parallel()
			_, vals := chartValues(t, file)
			linter := lint.AllWithKubeVersion(chartDir, vals, releaseNamespace, kubeVersion)
			for _, m := range linter.Messages {
				// INFO messages (e.g. "icon is recommended") are advice;
				// warnings and errors fail.
				if m.Severity >= support.WarningSev {
					t.Errorf("lint %s: %s", m.Path, m.Err)
				}
			}
		})
	}
}

// TestChartRender renders the defaults and every ci values file, decodes
// every document strictly and checks the chart's invariants on each.
func TestChartRender(t *testing.T) {
	t.Parallel()
	extra := map[string]func(t *testing.T, r *rendered){
		"":                           checkDefaultRender,
		"ci/pools-values.yaml":       checkPoolsRender,
		"ci/autoscaling-values.yaml": checkAutoscalingRender,
		"ci/external-values.yaml":    checkExternalRender,
		"ci/dev-values.yaml":         checkDevRender,
		"ci/files-values.yaml":       checkFilesRender,
	}
	files := append([]string{""}, ciValuesFiles(t)...)
	for _, file := range files {
		t.Run(testName(file), func(t *testing.T) {
			t.Parallel()
			defaults, override := chartValues(t, file)
			r := mustRender(t, override)
			checkInvariants(t, r, mergeValues(defaults, override))
			check, ok := extra[file]
			if !ok {
				t.Fatalf("no file-specific checks for %s: add them to TestChartRender", file)
			}
			check(t, r)
		})
	}
}

// checkInvariants asserts what must hold for every set of values.
func checkInvariants(t *testing.T, r *rendered, vals map[string]any) {
	t.Helper()
	checkNamesAndLabels(t, r)
	checkPodSecurity(t, r)
	api := checkAPIServer(t, r, vals)
	checkWorkers(t, r, vals, api)
	checkMigrationJob(t, r, api)
	checkVaultAndFiles(t, r, vals, api)
	checkRBAC(t, r, vals)
	checkNetworkPolicy(t, r, vals)
	checkReferences(t, r)
	checkNotes(t, r, vals)
}

// TestChartConsole: console.enabled and console.signInTTL reach the
// api-server as MANGO_CONSOLE and MANGO_CONSOLE_SIGNIN_TTL; a TTL that is
// not a duration is refused by the schema.
func TestChartConsole(t *testing.T) {
	t.Parallel()
	r := mustRender(t, map[string]any{"console": map[string]any{"enabled": false, "signInTTL": "30m"}})
	env := effectiveEnv(t, r, find[*appsv1.Deployment](t, r, apiServerName).Spec.Template.Spec.Containers[0])
	if env["MANGO_CONSOLE"] != "false" || env["MANGO_CONSOLE_SIGNIN_TTL"] != "30m" {
		t.Errorf("console disabled, 30m: MANGO_CONSOLE = %q, MANGO_CONSOLE_SIGNIN_TTL = %q", env["MANGO_CONSOLE"], env["MANGO_CONSOLE_SIGNIN_TTL"])
	}
	if _, err := renderChart(map[string]any{"console": map[string]any{"signInTTL": "a day"}}); err == nil || !strings.Contains(err.Error(), "signInTTL") {
		t.Errorf("signInTTL %q: err = %v, want a schema error naming it", "a day", err)
	}
}

// TestChartDeploymentsCatchupWindow: deployments.catchupWindow reaches
// the api-server as MANGO_DEPLOYMENT_CATCHUP_WINDOW (TestChartRender checks
// it on every values file, and that no worker gets it); a value that is
// not a Go duration, or an unknown key, is refused by the schema.
func TestChartDeploymentsCatchupWindow(t *testing.T) {
	t.Parallel()
	r := mustRender(t, map[string]any{"deployments": map[string]any{"catchupWindow": "30m"}})
	if got := effectiveEnv(t, r, find[*appsv1.Deployment](t, r, apiServerName).Spec.Template.Spec.Containers[0])["MANGO_DEPLOYMENT_CATCHUP_WINDOW"]; got != "30m" {
		t.Errorf("catchupWindow 30m: api-server MANGO_DEPLOYMENT_CATCHUP_WINDOW = %q, want 30m", got)
	}
	if _, err := renderChart(map[string]any{"deployments": map[string]any{"catchupWindow": "1 hour"}}); err == nil || !strings.Contains(err.Error(), "catchupWindow") {
		t.Errorf("catchupWindow %q: err = %v, want a schema error naming it", "1 hour", err)
	}
	if _, err := renderChart(map[string]any{"deployments": map[string]any{"catchup": "1h"}}); err == nil {
		t.Error("an unknown deployments key rendered; want a schema error")
	}
}

var hexSum = regexp.MustCompile(`^[0-9a-f]{64}$`)

func checkNamesAndLabels(t *testing.T, r *rendered) {
	t.Helper()
	if len(r.Objects) == 0 {
		t.Fatal("nothing rendered")
	}
	for _, o := range r.Objects {
		meta := o.Obj.(metav1.ObjectMetaAccessor).GetObjectMeta()
		if errs := validation.IsDNS1123Label(o.Name); len(errs) > 0 {
			t.Errorf("%s %q (%s): name is not a DNS label of at most 63 characters: %v", o.Kind, o.Name, o.Source, errs)
		}
		checkLabels(t, o.Kind+" "+o.Name, meta.GetLabels())
		if ns := meta.GetNamespace(); ns == "" {
			t.Errorf("%s %q: no namespace", o.Kind, o.Name)
		}
		if tpl := podTemplate(o.Obj); tpl != nil {
			checkLabels(t, o.Kind+" "+o.Name+" pod template", tpl.Labels)
		}
	}
}

func checkLabels(t *testing.T, what string, l map[string]string) {
	t.Helper()
	for k, v := range l {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			t.Errorf("%s: label key %q: %v", what, k, errs)
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("%s: label %s=%q: %v", what, k, v, errs)
		}
	}
	for _, k := range []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"} {
		if l[k] == "" {
			t.Errorf("%s: label %s missing (have %v)", what, k, l)
		}
	}
}

// podTemplate returns the pod template of a workload, else nil.
func podTemplate(obj any) *corev1.PodTemplateSpec {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return &o.Spec.Template
	case *batchv1.Job:
		return &o.Spec.Template
	}
	return nil
}

// checkPodSecurity: every pod runs as 65532, non-root, with the runtime's
// seccomp profile; every container has a read-only root, no privilege
// escalation and no capabilities; /tmp is an emptyDir.
func checkPodSecurity(t *testing.T, r *rendered) {
	t.Helper()
	pods := 0
	for _, o := range r.Objects {
		tpl := podTemplate(o.Obj)
		if tpl == nil {
			continue
		}
		pods++
		what := o.Kind + " " + o.Name
		ps := tpl.Spec.SecurityContext
		switch {
		case ps == nil:
			t.Errorf("%s: no pod securityContext", what)
			continue
		case ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot:
			t.Errorf("%s: runAsNonRoot = %s, want true", what, deref(ps.RunAsNonRoot))
		case ps.RunAsUser == nil || *ps.RunAsUser != 65532:
			t.Errorf("%s: runAsUser = %s, want 65532", what, deref(ps.RunAsUser))
		case ps.FSGroup == nil:
			t.Errorf("%s: no fsGroup", what)
		case ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
			t.Errorf("%s: seccompProfile = %+v, want RuntimeDefault", what, ps.SeccompProfile)
		}
		if tpl.Spec.HostNetwork || tpl.Spec.HostPID || tpl.Spec.HostIPC {
			t.Errorf("%s: shares a host namespace", what)
		}
		containers := append(slices.Clone(tpl.Spec.InitContainers), tpl.Spec.Containers...)
		if len(containers) == 0 {
			t.Errorf("%s: no containers", what)
		}
		for _, c := range containers {
			cw := what + " container " + c.Name
			sc := c.SecurityContext
			if sc == nil {
				t.Errorf("%s: no securityContext", cw)
				continue
			}
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("%s: readOnlyRootFilesystem = %s, want true", cw, deref(sc.ReadOnlyRootFilesystem))
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("%s: allowPrivilegeEscalation = %s, want false", cw, deref(sc.AllowPrivilegeEscalation))
			}
			if sc.Privileged != nil && *sc.Privileged {
				t.Errorf("%s: privileged", cw)
			}
			if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
				t.Errorf("%s: capabilities = %+v, want drop [ALL] and no add", cw, sc.Capabilities)
			}
			if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
				t.Errorf("%s: runs as root", cw)
			}
			if mountedAt(tpl, c, "/tmp") != "emptyDir" {
				t.Errorf("%s: /tmp is %q, want an emptyDir (the root filesystem is read-only)", cw, mountedAt(tpl, c, "/tmp"))
			}
			if c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
				t.Errorf("%s: resources %+v: want a memory limit and a CPU request", cw, c.Resources)
			}
		}
	}
	if pods == 0 {
		t.Error("no workloads rendered")
	}
}

// mountedAt describes the volume mounted at path: "emptyDir",
// "secret:<name>", "hostPath:<path>", "" when nothing is.
func mountedAt(tpl *corev1.PodTemplateSpec, c corev1.Container, path string) string {
	for _, m := range c.VolumeMounts {
		if m.MountPath != path {
			continue
		}
		for _, v := range tpl.Spec.Volumes {
			if v.Name != m.Name {
				continue
			}
			switch {
			case v.EmptyDir != nil:
				return "emptyDir"
			case v.Secret != nil:
				return "secret:" + v.Secret.SecretName
			case v.HostPath != nil:
				return "hostPath:" + v.HostPath.Path
			}
			return "other"
		}
		return "missing volume " + m.Name
	}
	return ""
}

// apiServerFacts is what the worker checks need from the api-server.
type apiServerFacts struct {
	ControlPlaneAddr string            // Service:grpc port
	DatabaseRef      string            // secret:<name>/<key>
	WorkerTokenRef   string            // secret:<name>/<key>
	Env              map[string]string // effective environment
}

func checkAPIServer(t *testing.T, r *rendered, vals map[string]any) apiServerFacts {
	t.Helper()
	d := find[*appsv1.Deployment](t, r, apiServerName)
	svc := find[*corev1.Service](t, r, apiServerName)
	checkChecksums(t, d)
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("api-server: %d containers, want 1", len(d.Spec.Template.Spec.Containers))
	}
	c := d.Spec.Template.Spec.Containers[0]
	env := effectiveEnv(t, r, c)
	for k, want := range map[string]string{"MANGO_HTTP_ADDR": "0.0.0.0:8080", "MANGO_GRPC_ADDR": "0.0.0.0:8081"} {
		if env[k] != want {
			t.Errorf("api-server %s = %q, want %q", k, env[k], want)
		}
	}
	for _, k := range []string{"MANGO_DATABASE_URL", "MANGO_WORKER_TOKEN", "MANGO_API_KEY"} {
		if !strings.HasPrefix(env[k], "secret:") {
			t.Errorf("api-server %s = %q, want a secretKeyRef", k, env[k])
		}
	}
	for _, k := range []string{"MANGO_TEMPORAL_HOSTPORT", "MANGO_TEMPORAL_NAMESPACE", "MANGO_SANDBOX", "MANGO_SANDBOX_PROVIDERS", "MANGO_TASK_QUEUE_PREFIX",
		"MANGO_WEBHOOK_ALLOW_PRIVATE", "MANGO_WEBHOOK_RETRY_MAX", "MANGO_DEPLOYMENT_CATCHUP_WINDOW", "MANGO_CONSOLE", "MANGO_CONSOLE_SIGNIN_TTL"} {
		if env[k] == "" {
			t.Errorf("api-server %s not set", k)
		}
	}
	if want, _ := vals["deployments"].(map[string]any)["catchupWindow"].(string); env["MANGO_DEPLOYMENT_CATCHUP_WINDOW"] != want {
		t.Errorf("api-server MANGO_DEPLOYMENT_CATCHUP_WINDOW = %q, want deployments.catchupWindow %q", env["MANGO_DEPLOYMENT_CATCHUP_WINDOW"], want)
	}
	// Providers: the enabled pools' unless apiServer.sandboxProviders says otherwise.
	providers := strings.Split(env["MANGO_SANDBOX_PROVIDERS"], ",")
	if override, _ := vals["apiServer"].(map[string]any)["sandboxProviders"].([]any); len(override) == 0 {
		var want []string
		for _, p := range expectedPools(t, vals) {
			if !slices.Contains(want, p.Provider) {
				want = append(want, p.Provider)
			}
		}
		if !slices.Equal(providers, want) {
			t.Errorf("api-server MANGO_SANDBOX_PROVIDERS = %v, want the enabled pools' providers %v", providers, want)
		}
	}
	if !slices.Contains(providers, env["MANGO_SANDBOX"]) {
		t.Errorf("api-server MANGO_SANDBOX = %q, not in MANGO_SANDBOX_PROVIDERS %v", env["MANGO_SANDBOX"], providers)
	}
	checkPorts(t, "api-server", c, map[string]int32{"http": 8080, "grpc": 8081})
	checkProbe(t, "api-server liveness", c.LivenessProbe, "/healthz", "http")
	checkProbe(t, "api-server readiness", c.ReadinessProbe, "/readyz", "http")
	checkGrace(t, "api-server", d, env["MANGO_SHUTDOWN_TIMEOUT"])
	if sa := d.Spec.Template.Spec.AutomountServiceAccountToken; sa == nil || *sa {
		t.Errorf("api-server pods mount a service account token (automountServiceAccountToken %s)", deref(sa))
	}

	// The Service: http and grpc to the api-server pods.
	ports := map[string]corev1.ServicePort{}
	for _, p := range svc.Spec.Ports {
		ports[p.Name] = p
	}
	wantPorts := map[string]int32{"http": 8080, "grpc": 8081}
	if svcVals, ok := vals["apiServer"].(map[string]any)["service"].(map[string]any); ok {
		wantPorts["http"] = int32(svcVals["httpPort"].(float64))
		wantPorts["grpc"] = int32(svcVals["grpcPort"].(float64))
	}
	for name, port := range wantPorts {
		p, ok := ports[name]
		if !ok || p.Port != port || p.TargetPort.String() != name {
			t.Errorf("api-server Service port %s = %+v, want port %d to target port %q", name, p, port, name)
		}
	}
	if !selects(svc.Spec.Selector, d.Spec.Template.Labels) {
		t.Errorf("api-server Service selector %v does not select the api-server pods %v", svc.Spec.Selector, d.Spec.Template.Labels)
	}
	return apiServerFacts{
		ControlPlaneAddr: fmt.Sprintf("%s:%d", svc.Name, ports["grpc"].Port),
		DatabaseRef:      env["MANGO_DATABASE_URL"],
		WorkerTokenRef:   env["MANGO_WORKER_TOKEN"],
		Env:              env,
	}
}

// deref formats an optional field: its value, or "unset".
func deref[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

func selects(selector, podLabels map[string]string) bool {
	return len(selector) > 0 && labels.SelectorFromSet(selector).Matches(labels.Set(podLabels))
}

func checkChecksums(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	for _, k := range []string{"checksum/config", "checksum/secret"} {
		if v := d.Spec.Template.Annotations[k]; !hexSum.MatchString(v) {
			t.Errorf("Deployment %s: pod annotation %s = %q, want a sha256 checksum", d.Name, k, v)
		}
	}
}

func checkPorts(t *testing.T, what string, c corev1.Container, want map[string]int32) {
	t.Helper()
	got := map[string]int32{}
	for _, p := range c.Ports {
		got[p.Name] = p.ContainerPort
	}
	for name, port := range want {
		if got[name] != port {
			t.Errorf("%s: container port %s = %d, want %d (have %v)", what, name, got[name], port, got)
		}
	}
}

func checkProbe(t *testing.T, what string, p *corev1.Probe, path, port string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s: no HTTP probe, want GET %s on port %s", what, path, port)
		return
	}
	if p.HTTPGet.Path != path || p.HTTPGet.Port.String() != port {
		t.Errorf("%s: GET %s on port %s, want GET %s on port %s", what, p.HTTPGet.Path, p.HTTPGet.Port.String(), path, port)
	}
}

// checkGrace: the pod's termination grace exceeds the binary's drain time.
func checkGrace(t *testing.T, what string, d *appsv1.Deployment, drain string) {
	t.Helper()
	dur, err := time.ParseDuration(drain)
	if err != nil {
		t.Errorf("%s: drain time %q: %v", what, drain, err)
		return
	}
	g := d.Spec.Template.Spec.TerminationGracePeriodSeconds
	if g == nil || time.Duration(*g)*time.Second <= dur {
		t.Errorf("%s: terminationGracePeriodSeconds = %s, want more than the drain time %s", what, deref(g), dur)
	}
}

// checkWorkers: one Deployment per enabled pool, each for its provider,
// dialling the api-server's gRPC Service, with no database credential and
// no chart secret but the worker token (and the model key, the router
// token, TLS files), plus the pool's own envFrom.
func checkWorkers(t *testing.T, r *rendered, vals map[string]any, api apiServerFacts) {
	t.Helper()
	pools := expectedPools(t, vals)
	var workers []*appsv1.Deployment
	for _, d := range all[*appsv1.Deployment](r) {
		if d.Spec.Template.Labels[workerLabelKey] == workerLabelVal {
			workers = append(workers, d)
		}
	}
	if len(workers) != len(pools) {
		t.Errorf("%d worker Deployments, want one per enabled pool (%d: %v)", len(workers), len(pools), pools)
	}
	tls := tlsSecrets(vals)
	for _, p := range pools {
		name := "mango-worker-" + p.Name
		d := find[*appsv1.Deployment](t, r, name)
		checkChecksums(t, d)
		spec := d.Spec.Template.Spec
		if len(spec.Containers) != 1 {
			t.Errorf("%s: %d containers, want 1", name, len(spec.Containers))
			continue
		}
		c := spec.Containers[0]
		env := effectiveEnv(t, r, c)
		checkWorkerEnv(t, name, d, c, env, p, api)
		checkWorkerNoDatabase(t, name, spec, c, env, api)
		checkWorkerSecrets(t, name, d, c, env, p, tls)
		checkWorkerServiceAccount(t, r, name, spec, p)
	}
}

// checkWorkerEnv: the worker of pool p runs its provider, dials the
// api-server's gRPC Service and Temporal as the api-server does, and
// serves metrics and liveness on 9090, with a grace period over its drain
// time.
func checkWorkerEnv(t *testing.T, name string, d *appsv1.Deployment, c corev1.Container, env map[string]string, p pool, api apiServerFacts) {
	t.Helper()
	if env["MANGO_SANDBOX"] != p.Provider {
		t.Errorf("%s: MANGO_SANDBOX = %q, want the pool's provider %q", name, env["MANGO_SANDBOX"], p.Provider)
	}
	if env["MANGO_CONTROLPLANE_ADDR"] != api.ControlPlaneAddr {
		t.Errorf("%s: MANGO_CONTROLPLANE_ADDR = %q, want the api-server gRPC Service %q", name, env["MANGO_CONTROLPLANE_ADDR"], api.ControlPlaneAddr)
	}
	if env["MANGO_WORKER_TOKEN"] != api.WorkerTokenRef {
		t.Errorf("%s: MANGO_WORKER_TOKEN = %q, want the api-server's %q", name, env["MANGO_WORKER_TOKEN"], api.WorkerTokenRef)
	}
	for _, k := range []string{"MANGO_TEMPORAL_HOSTPORT", "MANGO_TEMPORAL_NAMESPACE", "MANGO_TASK_QUEUE_PREFIX"} {
		if env[k] != api.Env[k] {
			t.Errorf("%s: %s = %q, want the api-server's %q", name, k, env[k], api.Env[k])
		}
	}
	for _, k := range []string{"MANGO_WEBHOOK_RETRY_MAX", "MANGO_DEPLOYMENT_CATCHUP_WINDOW", "MANGO_CONSOLE"} {
		if v, ok := env[k]; ok {
			t.Errorf("%s: %s = %q; it is an api-server setting, want it unset on workers", name, k, v)
		}
	}
	if env["MANGO_METRICS_ADDR"] != "0.0.0.0:9090" {
		t.Errorf("%s: MANGO_METRICS_ADDR = %q, want 0.0.0.0:9090", name, env["MANGO_METRICS_ADDR"])
	}
	checkPorts(t, name, c, map[string]int32{"metrics": 9090})
	checkProbe(t, name+" liveness", c.LivenessProbe, "/healthz", "metrics")
	checkGrace(t, name, d, env["MANGO_SHUTDOWN_GRACE"])
}

// checkWorkerNoDatabase: a worker gets no database credential of any
// kind, and neither the database Secret nor its key, under any name.
func checkWorkerNoDatabase(t *testing.T, name string, spec corev1.PodSpec, c corev1.Container, env map[string]string, api apiServerFacts) {
	t.Helper()
	for k, v := range env {
		if k == "MANGO_DATABASE_URL" || strings.Contains(v, "postgres://") || strings.Contains(v, "postgresql://") ||
			v == api.DatabaseRef || (strings.HasPrefix(v, "secret:") && strings.Contains(strings.ToLower(v), "database")) {
			t.Errorf("%s: %s=%q reaches the database credential", name, k, v)
		}
	}
	dbName, dbKey, _ := strings.Cut(strings.TrimPrefix(api.DatabaseRef, "secret:"), "/")
	for _, e := range c.Env {
		if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil && (ref.SecretKeyRef.Name == dbName || ref.SecretKeyRef.Key == dbKey) {
			t.Errorf("%s: env %s reads %s/%s, the database Secret's name or key (%s/%s)", name, e.Name, ref.SecretKeyRef.Name, ref.SecretKeyRef.Key, dbName, dbKey)
		}
	}
	for _, ef := range c.EnvFrom {
		if ef.SecretRef != nil && ef.SecretRef.Name == dbName {
			t.Errorf("%s: envFrom the database Secret %s", name, dbName)
		}
	}
	for _, v := range spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == dbName {
			t.Errorf("%s: mounts the database Secret %s", name, dbName)
		}
	}
}

// checkWorkerSecrets: chart-supplied secrets are the worker token, the
// model key with a real model, the router token of a k8s pool, nothing
// else; envFrom and Secret volumes are the pool's own (and the TLS
// Secrets), Secrets mounted read-only.
func checkWorkerSecrets(t *testing.T, name string, d *appsv1.Deployment, c corev1.Container, env map[string]string, p pool, tls []string) {
	t.Helper()
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			continue
		}
		ok := false
		switch e.Name {
		case "MANGO_WORKER_TOKEN":
			ok = true
		case "MANGO_MODEL_API_KEY":
			ok = env["MANGO_MODEL"] != "fake"
		case "MANGO_K8S_ROUTER_TOKEN":
			ok = p.Provider == "k8s"
		default:
			ok = poolEnvHas(p, e.Name)
		}
		if !ok {
			t.Errorf("%s: env %s from %+v is not a credential a worker of provider %s may get", name, e.Name, e.ValueFrom, p.Provider)
		}
	}
	ownEnvFrom := poolSecretRefs(p)
	for _, ef := range c.EnvFrom {
		if ef.SecretRef != nil && !slices.Contains(ownEnvFrom, ef.SecretRef.Name) {
			t.Errorf("%s: envFrom Secret %q is not one of the pool's own %v", name, ef.SecretRef.Name, ownEnvFrom)
		}
		if ef.ConfigMapRef != nil && ef.ConfigMapRef.Name != name && !poolConfigMapRef(p, ef.ConfigMapRef.Name) {
			t.Errorf("%s: envFrom ConfigMap %q is neither the pool's nor in its envFrom", name, ef.ConfigMapRef.Name)
		}
	}
	allowedVolumes := append(slices.Clone(tls), poolVolumeSecrets(p)...)
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil && !slices.Contains(allowedVolumes, v.Secret.SecretName) {
			t.Errorf("%s: volume of Secret %q is neither a TLS Secret %v nor the pool's", name, v.Secret.SecretName, allowedVolumes)
		}
	}
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(mountedAt(&d.Spec.Template, c, m.MountPath), "secret:") && !m.ReadOnly {
			t.Errorf("%s: Secret mounted read-write at %s", name, m.MountPath)
		}
	}
}

// checkWorkerServiceAccount: a token only where the provider calls the
// Kubernetes API.
func checkWorkerServiceAccount(t *testing.T, r *rendered, name string, spec corev1.PodSpec, p pool) {
	t.Helper()
	wantToken := p.Provider == "k8s"
	if got := spec.AutomountServiceAccountToken; got == nil || *got != wantToken {
		t.Errorf("%s: automountServiceAccountToken = %s, want %v", name, deref(got), wantToken)
	}
	if has[*corev1.ServiceAccount](r, spec.ServiceAccountName) {
		sa := find[*corev1.ServiceAccount](t, r, spec.ServiceAccountName)
		if got := sa.AutomountServiceAccountToken; got == nil || *got != wantToken {
			t.Errorf("ServiceAccount %s: automountServiceAccountToken = %s, want %v", sa.Name, deref(got), wantToken)
		}
	}
}

func poolEnvHas(p pool, name string) bool {
	env, _ := p.Values["env"].([]any)
	for _, e := range env {
		if e.(map[string]any)["name"] == name {
			return true
		}
	}
	return false
}

func poolSecretRefs(p pool) []string {
	var out []string
	ef, _ := p.Values["envFrom"].([]any)
	for _, e := range ef {
		if ref, ok := e.(map[string]any)["secretRef"].(map[string]any); ok {
			out = append(out, ref["name"].(string))
		}
	}
	return out
}

func poolConfigMapRef(p pool, name string) bool {
	ef, _ := p.Values["envFrom"].([]any)
	for _, e := range ef {
		if ref, ok := e.(map[string]any)["configMapRef"].(map[string]any); ok && ref["name"] == name {
			return true
		}
	}
	return false
}

// poolVolumeSecrets: Secrets a pool's own values mount (extraVolumes, the
// docker registry credentials).
func poolVolumeSecrets(p pool) []string {
	var out []string
	vols, _ := p.Values["extraVolumes"].([]any)
	for _, v := range vols {
		if s, ok := v.(map[string]any)["secret"].(map[string]any); ok {
			out = append(out, s["secretName"].(string))
		}
	}
	if d, ok := p.Values["docker"].(map[string]any); ok {
		if s, ok := d["configSecret"].(string); ok && s != "" {
			out = append(out, s)
		}
	}
	return out
}

// tlsSecrets: the TLS Secrets the values give the workers.
func tlsSecrets(vals map[string]any) []string {
	var out []string
	if s := dig(vals, "temporal", "tls", "existingSecret"); s != "" {
		out = append(out, s)
	}
	if s := dig(vals, "controlPlane", "tls", "clientSecret"); s != "" {
		out = append(out, s)
	}
	return out
}

// dig returns the string at a path of nested maps, "" if absent.
func dig(m map[string]any, path ...string) string {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = mm[p]
	}
	s, _ := cur.(string)
	return s
}

func checkMigrationJob(t *testing.T, r *rendered, api apiServerFacts) {
	t.Helper()
	jobs := all[*batchv1.Job](r)
	if len(jobs) != 1 {
		t.Fatalf("%d Jobs, want the migration Job", len(jobs))
	}
	j := jobs[0]
	hook := false
	for _, o := range r.Objects {
		if o.Obj == any(j) {
			hook = o.Hook
		}
	}
	if !hook {
		t.Errorf("Job %s is a release resource, want a Helm hook", j.Name)
	}
	events := strings.Split(j.Annotations["helm.sh/hook"], ",")
	slices.Sort(events)
	if !slices.Equal(events, []string{"pre-install", "pre-upgrade"}) {
		t.Errorf("Job %s: helm.sh/hook = %q, want pre-install,pre-upgrade", j.Name, j.Annotations["helm.sh/hook"])
	}
	policy := strings.Split(j.Annotations["helm.sh/hook-delete-policy"], ",")
	for _, want := range []string{"before-hook-creation", "hook-succeeded"} {
		if !slices.Contains(policy, want) {
			t.Errorf("Job %s: hook-delete-policy %q lacks %s", j.Name, j.Annotations["helm.sh/hook-delete-policy"], want)
		}
	}
	spec := j.Spec.Template.Spec
	if spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("Job %s: restartPolicy %q, want Never", j.Name, spec.RestartPolicy)
	}
	c := spec.Containers[0]
	if !slices.Equal(c.Args, []string{"migrate"}) || len(c.Command) > 0 {
		t.Errorf("Job %s: command %v args %v, want the image's entrypoint with args [migrate]", j.Name, c.Command, c.Args)
	}
	if got := effectiveEnv(t, r, c)["MANGO_DATABASE_URL"]; got != api.DatabaseRef {
		t.Errorf("Job %s: MANGO_DATABASE_URL = %q, want the api-server's %q", j.Name, got, api.DatabaseRef)
	}
	if len(c.EnvFrom) > 0 || spec.ServiceAccountName != "" {
		t.Errorf("Job %s: uses envFrom %v / ServiceAccount %q, which do not exist yet when a pre-install hook runs", j.Name, c.EnvFrom, spec.ServiceAccountName)
	}
	d := find[*appsv1.Deployment](t, r, apiServerName)
	if c.Image != d.Spec.Template.Spec.Containers[0].Image {
		t.Errorf("Job %s: image %q, want the api-server's %q", j.Name, c.Image, d.Spec.Template.Spec.Containers[0].Image)
	}
	// A chart-made Secret the Job reads must exist before it: a hook of lower weight.
	jobWeight, _ := strconv.Atoi(j.Annotations["helm.sh/hook-weight"])
	for _, o := range r.Objects {
		s, ok := o.Obj.(*corev1.Secret)
		if !ok || "secret:"+s.Name+"/"+firstKey(s) != api.DatabaseRef {
			continue
		}
		w, err := strconv.Atoi(s.Annotations["helm.sh/hook-weight"])
		if !o.Hook || err != nil || w >= jobWeight || !strings.Contains(s.Annotations["helm.sh/hook"], "pre-install") {
			t.Errorf("Secret %s: hook %v %q weight %q, want a pre-install hook weighing less than the Job (%d)", s.Name, o.Hook, s.Annotations["helm.sh/hook"], s.Annotations["helm.sh/hook-weight"], jobWeight)
		}
	}
}

func firstKey(s *corev1.Secret) string {
	for k := range s.Data {
		return k
	}
	for k := range s.StringData {
		return k
	}
	return ""
}

// checkRBAC: a Role only for k8s pools, granting only the agent-sandbox
// kinds and verbs, in the pool's sandbox namespace, bound to its account.
func checkRBAC(t *testing.T, r *rendered, vals map[string]any) {
	t.Helper()
	roles := map[string]*rbacv1.Role{}
	for _, role := range all[*rbacv1.Role](r) {
		roles[role.Name] = role
		for _, rule := range role.Rules {
			for _, list := range [][]string{rule.APIGroups, rule.Resources, rule.Verbs, rule.ResourceNames} {
				if slices.Contains(list, "*") {
					t.Errorf("Role %s: wildcard in %+v", role.Name, rule)
				}
			}
			if len(rule.NonResourceURLs) > 0 {
				t.Errorf("Role %s: non-resource URLs %v", role.Name, rule.NonResourceURLs)
			}
			for _, g := range rule.APIGroups {
				for _, res := range rule.Resources {
					if k8sRBAC[g] != res {
						t.Errorf("Role %s: grants %s in group %q, want only %v", role.Name, res, g, k8sRBAC)
					}
				}
			}
			for _, v := range rule.Verbs {
				if !slices.Contains(k8sVerbs, v) {
					t.Errorf("Role %s: verb %q, want only %v", role.Name, v, k8sVerbs)
				}
			}
		}
	}
	want := 0
	for _, p := range expectedPools(t, vals) {
		if p.Provider != "k8s" {
			if _, ok := roles["mango-worker-"+p.Name]; ok {
				t.Errorf("pool %s (%s) has a Role", p.Name, p.Provider)
			}
			continue
		}
		want++
		role, ok := roles["mango-worker-"+p.Name]
		if !ok {
			t.Errorf("k8s pool %s: no Role", p.Name)
			continue
		}
		d := find[*appsv1.Deployment](t, r, "mango-worker-"+p.Name)
		ns := effectiveEnv(t, r, d.Spec.Template.Spec.Containers[0])["MANGO_K8S_NAMESPACE"]
		if role.Namespace != ns {
			t.Errorf("Role %s in namespace %q, want the sandbox namespace MANGO_K8S_NAMESPACE=%q", role.Name, role.Namespace, ns)
		}
		rb := find[*rbacv1.RoleBinding](t, r, role.Name)
		sa := d.Spec.Template.Spec.ServiceAccountName
		if rb.Namespace != ns || rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name ||
			len(rb.Subjects) != 1 || rb.Subjects[0].Kind != "ServiceAccount" || rb.Subjects[0].Name != sa || rb.Subjects[0].Namespace != releaseNamespace {
			t.Errorf("RoleBinding %s = %+v %+v in %q, want Role %s bound to ServiceAccount %s/%s in %q", rb.Name, rb.RoleRef, rb.Subjects, rb.Namespace, role.Name, releaseNamespace, sa, ns)
		}
	}
	if len(roles) != want {
		t.Errorf("%d Roles, want one per k8s pool (%d)", len(roles), want)
	}
	if n := len(all[*rbacv1.RoleBinding](r)); n != want {
		t.Errorf("%d RoleBindings, want %d", n, want)
	}
}

// checkNetworkPolicy: when enabled, the gRPC port admits only worker pods.
func checkNetworkPolicy(t *testing.T, r *rendered, vals map[string]any) {
	t.Helper()
	nps := all[*networkingv1.NetworkPolicy](r)
	enabled, _ := vals["networkPolicy"].(map[string]any)["enabled"].(bool)
	if !enabled {
		if len(nps) > 0 {
			t.Errorf("networkPolicy.enabled is false, but %d NetworkPolicies rendered", len(nps))
		}
		return
	}
	if len(nps) != 1 {
		t.Fatalf("%d NetworkPolicies, want 1", len(nps))
	}
	np := nps[0]
	api := find[*appsv1.Deployment](t, r, apiServerName)
	if !selects(np.Spec.PodSelector.MatchLabels, api.Spec.Template.Labels) {
		t.Errorf("NetworkPolicy selects %v, not the api-server pods %v", np.Spec.PodSelector.MatchLabels, api.Spec.Template.Labels)
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		t.Errorf("NetworkPolicy policyTypes %v lack Ingress", np.Spec.PolicyTypes)
	}
	extra := 0
	if g, ok := vals["networkPolicy"].(map[string]any)["grpc"].(map[string]any); ok {
		l, _ := g["extraFrom"].([]any)
		extra = len(l)
	}
	grpcRules, httpRules := 0, 0
	for _, rule := range np.Spec.Ingress {
		if len(rule.Ports) == 0 {
			t.Errorf("NetworkPolicy rule %+v admits every port", rule)
		}
		for _, port := range rule.Ports {
			switch port.Port.String() {
			case "8080", "http":
				httpRules++
			case "8081", "grpc":
				grpcRules++
				if len(rule.From) != 1+extra {
					t.Errorf("NetworkPolicy gRPC rule admits %d peers %+v, want the worker pods plus %d extra", len(rule.From), rule.From, extra)
				}
				peer := rule.From[0]
				if peer.PodSelector == nil || peer.NamespaceSelector != nil || peer.IPBlock != nil ||
					peer.PodSelector.MatchLabels[workerLabelKey] != workerLabelVal ||
					peer.PodSelector.MatchLabels["app.kubernetes.io/instance"] != releaseName {
					t.Errorf("NetworkPolicy gRPC peer %+v, want a podSelector on %s=%s of this release", peer, workerLabelKey, workerLabelVal)
					continue
				}
				sel := peer.PodSelector.MatchLabels
				if selects(sel, api.Spec.Template.Labels) {
					t.Errorf("NetworkPolicy gRPC peer %v also selects the api-server pods", sel)
				}
				for _, d := range all[*appsv1.Deployment](r) {
					isWorker := d.Spec.Template.Labels[workerLabelKey] == workerLabelVal
					if isWorker != selects(sel, d.Spec.Template.Labels) {
						t.Errorf("NetworkPolicy gRPC peer %v: selects Deployment %s = %v, want %v", sel, d.Name, !isWorker, isWorker)
					}
				}
			default:
				t.Errorf("NetworkPolicy admits port %s", port.Port.String())
			}
		}
	}
	if grpcRules != 1 || httpRules != 1 {
		t.Errorf("NetworkPolicy has %d gRPC and %d HTTP rules, want one each", grpcRules, httpRules)
	}
}

// checkReferences: HPAs, PDBs, ServiceMonitors and Ingresses point at
// objects that exist.
func checkReferences(t *testing.T, r *rendered) {
	t.Helper()
	for _, h := range all[*autoscalingv2.HorizontalPodAutoscaler](r) {
		d := find[*appsv1.Deployment](t, r, h.Spec.ScaleTargetRef.Name)
		if h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.ScaleTargetRef.APIVersion != "apps/v1" {
			t.Errorf("HPA %s targets %+v", h.Name, h.Spec.ScaleTargetRef)
		}
		if d.Spec.Replicas != nil {
			t.Errorf("Deployment %s sets replicas %d beside its HPA", d.Name, *d.Spec.Replicas)
		}
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 1 || h.Spec.MaxReplicas < *h.Spec.MinReplicas || len(h.Spec.Metrics) == 0 {
			t.Errorf("HPA %s: min %s max %d metrics %d, want 1 <= min <= max and a metric", h.Name, deref(h.Spec.MinReplicas), h.Spec.MaxReplicas, len(h.Spec.Metrics))
		}
	}
	for _, d := range all[*appsv1.Deployment](r) {
		if d.Spec.Replicas == nil && !has[*autoscalingv2.HorizontalPodAutoscaler](r, d.Name) {
			t.Errorf("Deployment %s has no replicas and no HPA", d.Name)
		}
	}
	for _, p := range all[*policyv1.PodDisruptionBudget](r) {
		d := find[*appsv1.Deployment](t, r, p.Name)
		if p.Spec.Selector == nil || !selects(p.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
			t.Errorf("PDB %s does not select the pods of Deployment %s", p.Name, d.Name)
		}
		if (p.Spec.MinAvailable == nil) == (p.Spec.MaxUnavailable == nil) {
			t.Errorf("PDB %s: want exactly one of minAvailable and maxUnavailable", p.Name)
		}
	}
	for _, sm := range all[*serviceMonitor](r) {
		svc := find[*corev1.Service](t, r, sm.Name)
		if !selects(sm.Spec.Selector.MatchLabels, svc.Labels) {
			t.Errorf("ServiceMonitor %s selects %v, not Service %s %v", sm.Name, sm.Spec.Selector.MatchLabels, svc.Name, svc.Labels)
		}
		for _, svc2 := range all[*corev1.Service](r) {
			if svc2.Name != svc.Name && selects(sm.Spec.Selector.MatchLabels, svc2.Labels) {
				t.Errorf("ServiceMonitor %s also selects Service %s", sm.Name, svc2.Name)
			}
		}
		if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Path != "/metrics" || !servicePort(svc, sm.Spec.Endpoints[0].Port) {
			t.Errorf("ServiceMonitor %s endpoints %+v, want /metrics on a port of Service %s", sm.Name, sm.Spec.Endpoints, svc.Name)
		}
	}
	for _, ing := range all[*networkingv1.Ingress](r) {
		for _, rule := range ing.Spec.Rules {
			for _, p := range rule.HTTP.Paths {
				b := p.Backend.Service
				if b == nil || b.Name != apiServerName || b.Port.Name != "http" {
					t.Errorf("Ingress %s path %s goes to %+v, want the api-server's http port", ing.Name, p.Path, b)
				}
			}
		}
	}
}

func servicePort(svc *corev1.Service, name string) bool {
	for _, p := range svc.Spec.Ports {
		if p.Name == name {
			return true
		}
	}
	return false
}

func checkNotes(t *testing.T, r *rendered, vals map[string]any) {
	t.Helper()
	reach := "kubectl -n " + releaseNamespace + " port-forward svc/" + apiServerName
	if ing, _ := vals["apiServer"].(map[string]any)["ingress"].(map[string]any); ing["enabled"] == true {
		host := ing["hosts"].([]any)[0].(map[string]any)["host"].(string)
		reach = "MANGO_BASE_URL=http"
		if tls, _ := ing["tls"].([]any); len(tls) > 0 {
			reach += "s"
		}
		reach += "://" + host
	}
	for _, want := range []string{reach, "MANGO_API_KEY", `curl -s "$MANGO_BASE_URL/v1/agents" -H "x-api-key: $MANGO_API_KEY"`} {
		if !strings.Contains(r.Notes, want) {
			t.Errorf("NOTES lack %q:\n%s", want, r.Notes)
		}
	}
}

// File-specific expectations.

func checkDefaultRender(t *testing.T, r *rendered) {
	d := find[*appsv1.Deployment](t, r, "mango-worker-local")
	if img := d.Spec.Template.Spec.Containers[0].Image; img != "mangohq/mango-execution-worker-local:0.1.0" {
		t.Errorf("local pool image %q, want the local worker image with the chart's appVersion", img)
	}
	if img := find[*appsv1.Deployment](t, r, apiServerName).Spec.Template.Spec.Containers[0].Image; img != "mangohq/mango-api-server:0.1.0" {
		t.Errorf("api-server image %q, want mangohq/mango-api-server:0.1.0", img)
	}
	if n := len(all[*corev1.Secret](r)); n != 0 {
		t.Errorf("default values create %d Secrets, want none (secrets by reference)", n)
	}
	for _, kind := range []string{"Ingress", "NetworkPolicy", "ServiceMonitor", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Role"} {
		for _, o := range r.Objects {
			if o.Kind == kind {
				t.Errorf("default values render %s %s; optional objects are off by default", kind, o.Name)
			}
		}
	}
	env := effectiveEnv(t, r, d.Spec.Template.Spec.Containers[0])
	if env["MANGO_MODEL"] != "fake" || env["MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX"] != "" {
		t.Errorf("default local pool: MANGO_MODEL=%q MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX=%q, want fake and unset", env["MANGO_MODEL"], env["MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX"])
	}
	apiKey := find[*appsv1.Deployment](t, r, apiServerName).Spec.Template.Spec.Containers[0].Env
	for _, e := range apiKey {
		if e.Name == "MANGO_API_KEY" && (e.ValueFrom.SecretKeyRef.Optional == nil || !*e.ValueFrom.SecretKeyRef.Optional) {
			t.Errorf("MANGO_API_KEY of the default Secret name is required; want optional so the api-server starts without a bootstrap key")
		}
	}
}

func checkPoolsRender(t *testing.T, r *rendered) {
	if has[*appsv1.Deployment](r, "mango-worker-local") {
		t.Error("disabled pool local has a Deployment")
	}
	docker := find[*appsv1.Deployment](t, r, "mango-worker-docker")
	if got := mountedAt(&docker.Spec.Template, docker.Spec.Template.Spec.Containers[0], "/var/run/docker.sock"); got != "hostPath:/var/run/docker.sock" {
		t.Errorf("docker pool: /var/run/docker.sock is %q, want the node's socket", got)
	}
	for _, v := range docker.Spec.Template.Spec.Volumes {
		if v.HostPath != nil && (v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathSocket) {
			t.Errorf("docker pool: hostPath %s type %s, want Socket", v.HostPath.Path, deref(v.HostPath.Type))
		}
	}
	if g := docker.Spec.Template.Spec.SecurityContext.SupplementalGroups; !slices.Equal(g, []int64{999}) {
		t.Errorf("docker pool supplementalGroups %v, want [999] (the socket's group)", g)
	}
	if v, set := effectiveEnv(t, r, docker.Spec.Template.Spec.Containers[0])["MANGO_DOCKER_WARM_POOL"]; set {
		t.Errorf("docker pool without docker.warmPool sets MANGO_DOCKER_WARM_POOL=%q", v)
	}
	if r := docker.Spec.Replicas; r == nil || *r != 2 {
		t.Errorf("docker pool replicas %s, want 2", deref(r))
	}
	e2b := find[*appsv1.Deployment](t, r, "mango-worker-e2b")
	if ef := e2b.Spec.Template.Spec.Containers[0].EnvFrom; len(ef) != 2 || ef[1].SecretRef == nil || ef[1].SecretRef.Name != "e2b-credentials" {
		t.Errorf("e2b pool envFrom %+v, want its ConfigMap then Secret e2b-credentials", ef)
	}
	if e2b.Spec.Template.Spec.Affinity == nil {
		t.Error("e2b pool lost its affinity")
	}
	k8s := find[*appsv1.Deployment](t, r, "mango-worker-k8s")
	env := effectiveEnv(t, r, k8s.Spec.Template.Spec.Containers[0])
	for k, want := range map[string]string{
		"MANGO_K8S_NAMESPACE":    "agent-sandboxes",
		"MANGO_K8S_ROUTER_URL":   "http://sandbox-router-svc.agent-sandbox:8080",
		"MANGO_K8S_IMAGE":        "registry.example.com/python-runtime-sandbox:0.5",
		"MANGO_K8S_ROUTER_TOKEN": "secret:sandbox-router/token",
	} {
		if env[k] != want {
			t.Errorf("k8s pool %s = %q, want %q", k, env[k], want)
		}
	}
	if img := k8s.Spec.Template.Spec.Containers[0].Image; img != "mangohq/mango-execution-worker:0.1.0-k8s" {
		t.Errorf("k8s pool image %q, want the pool's tag over the default repository", img)
	}
	role := find[*rbacv1.Role](t, r, "mango-worker-k8s")
	want := []rbacv1.PolicyRule{{APIGroups: []string{"agents.x-k8s.io"}, Resources: []string{"sandboxes"}, Verbs: k8sVerbs}}
	if fmt.Sprint(role.Rules) != fmt.Sprint(want) {
		t.Errorf("k8s pool Role rules %+v, want %+v (image mode)", role.Rules, want)
	}
	api := effectiveEnv(t, r, find[*appsv1.Deployment](t, r, apiServerName).Spec.Template.Spec.Containers[0])
	if api["MANGO_SANDBOX"] != "docker" || api["MANGO_SANDBOX_PROVIDERS"] != "docker,e2b,k8s" {
		t.Errorf("api-server MANGO_SANDBOX=%q MANGO_SANDBOX_PROVIDERS=%q, want docker and docker,e2b,k8s", api["MANGO_SANDBOX"], api["MANGO_SANDBOX_PROVIDERS"])
	}
}

func checkAutoscalingRender(t *testing.T, r *rendered) {
	for _, name := range []string{apiServerName, "mango-worker-docker", "mango-worker-e2b"} {
		h := find[*autoscalingv2.HorizontalPodAutoscaler](t, r, name)
		find[*policyv1.PodDisruptionBudget](t, r, name)
		if name == "mango-worker-e2b" && (h.Spec.MaxReplicas != 20 || deref(h.Spec.MinReplicas) != "2") {
			t.Errorf("e2b HPA min %s max %d, want the pool's max 20 over the defaults' min 2", deref(h.Spec.MinReplicas), h.Spec.MaxReplicas)
		}
	}
	if h := find[*autoscalingv2.HorizontalPodAutoscaler](t, r, apiServerName); len(h.Spec.Metrics) != 2 {
		t.Errorf("api-server HPA has %d metrics, want CPU and memory", len(h.Spec.Metrics))
	}
	if p := find[*policyv1.PodDisruptionBudget](t, r, "mango-worker-e2b"); p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.String() != "25%" {
		t.Errorf("e2b PDB maxUnavailable %v, want 25%%", p.Spec.MaxUnavailable)
	}
	docker := find[*appsv1.Deployment](t, r, "mango-worker-docker")
	env := effectiveEnv(t, r, docker.Spec.Template.Spec.Containers[0])
	if env["DOCKER_HOST"] != "tcp://dockerd.sandboxes.svc:2375" {
		t.Errorf("docker pool DOCKER_HOST = %q", env["DOCKER_HOST"])
	}
	if env["MANGO_DOCKER_WARM_POOL"] != "4" {
		t.Errorf("docker pool MANGO_DOCKER_WARM_POOL = %q, want docker.warmPool 4", env["MANGO_DOCKER_WARM_POOL"])
	}
	for _, v := range docker.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			t.Errorf("docker pool with DOCKER_HOST mounts hostPath %s", v.HostPath.Path)
		}
	}
}

func checkExternalRender(t *testing.T, r *rendered) {
	find[*networkingv1.Ingress](t, r, apiServerName)
	for _, name := range []string{apiServerName, "mango-worker-docker", "mango-worker-daytona", "mango-worker-dev-local"} {
		find[*serviceMonitor](t, r, name)
	}
	apiDep := find[*appsv1.Deployment](t, r, apiServerName)
	apiC := apiDep.Spec.Template.Spec.Containers[0]
	api := effectiveEnv(t, r, apiC)
	for k, want := range map[string]string{
		"MANGO_DATABASE_URL":             "secret:mango-postgres/uri",
		"MANGO_WORKER_TOKEN":             "secret:mango-controlplane/token",
		"MANGO_API_KEY":                  "secret:mango-bootstrap-key/api-key",
		"MANGO_TEMPORAL_HOSTPORT":        "mango.a1b2c.tmprl.cloud:7233",
		"MANGO_TEMPORAL_TLS":             "true",
		"MANGO_TEMPORAL_TLS_CERT_FILE":   "/etc/mango/tls/temporal/tls.crt",
		"MANGO_TEMPORAL_TLS_KEY_FILE":    "/etc/mango/tls/temporal/tls.key",
		"MANGO_TEMPORAL_TLS_CA_FILE":     "",
		"MANGO_TEMPORAL_TLS_SERVER_NAME": "mango.a1b2c.tmprl.cloud",
		"MANGO_GRPC_TLS_CERT_FILE":       "/etc/mango/tls/controlplane/tls.crt",
		"MANGO_GRPC_TLS_KEY_FILE":        "/etc/mango/tls/controlplane/tls.key",
		"MANGO_GRPC_TLS_CLIENT_CA_FILE":  "/etc/mango/tls/controlplane/ca.crt",
		"MANGO_DATABASE_MAX_CONNS":       "64",
		"MANGO_REQUIRE_LIVE_WORKER":      "true",
		"MANGO_HOST_GONE_AFTER":          "5m",
		"MANGO_WORK_LEASE_TTL":           "10m",
		"MANGO_WORK_MAX_LEASE_TTL":       "2h",
		"MANGO_VAULT_KEYS":               "secret:mango-vault-keys-2026/vault-keys",
		"MANGO_FILES_S3_ENDPOINT":        "https://s3.eu-west-1.amazonaws.com",
		"MANGO_FILES_S3_BUCKET":          "mango-prod-files",
		"MANGO_FILES_S3_REGION":          "eu-west-1",
		"MANGO_FILES_S3_ACCESS_KEY_ID":   "", // the IAM role of the ServiceAccount
	} {
		if api[k] != want {
			t.Errorf("api-server %s = %q, want %q", k, api[k], want)
		}
	}
	for path, want := range map[string]string{
		"/etc/mango/tls/temporal":     "secret:temporal-client-tls",
		"/etc/mango/tls/controlplane": "secret:mango-controlplane-server-tls",
	} {
		if got := mountedAt(&apiDep.Spec.Template, apiC, path); got != want {
			t.Errorf("api-server %s is %q, want %q", path, got, want)
		}
	}
	for _, pool := range []string{"docker", "daytona", "dev-local"} {
		d := find[*appsv1.Deployment](t, r, "mango-worker-"+pool)
		c := d.Spec.Template.Spec.Containers[0]
		env := effectiveEnv(t, r, c)
		wantKey := "secret:anthropic/api-key"
		if pool == "dev-local" {
			wantKey = ""
		}
		for k, want := range map[string]string{
			"MANGO_CONTROLPLANE_TLS_CA_FILE":   "/etc/mango/tls/controlplane/ca.crt",
			"MANGO_CONTROLPLANE_TLS_CERT_FILE": "/etc/mango/tls/controlplane/tls.crt",
			"MANGO_CONTROLPLANE_TLS_KEY_FILE":  "/etc/mango/tls/controlplane/tls.key",
			"MANGO_TEMPORAL_TLS_CERT_FILE":     "/etc/mango/tls/temporal/tls.crt",
			"MANGO_MODEL_API_KEY":              wantKey,
		} {
			if env[k] != want {
				t.Errorf("pool %s: %s = %q, want %q", pool, k, env[k], want)
			}
		}
		if got := mountedAt(&d.Spec.Template, c, "/etc/mango/tls/controlplane"); got != "secret:mango-controlplane-client-tls" {
			t.Errorf("pool %s: /etc/mango/tls/controlplane is %q, want the client TLS Secret", pool, got)
		}
		find[*corev1.Service](t, r, "mango-worker-"+pool)
	}
	daytona := effectiveEnv(t, r, find[*appsv1.Deployment](t, r, "mango-worker-daytona").Spec.Template.Spec.Containers[0])
	if daytona["MANGO_MODEL"] != "anthropic" || daytona["MANGO_MODEL_ID"] != "claude-opus-4-1" || daytona["MANGO_OUTCOME_GRADER_MODEL"] != "claude-sonnet-4-5" {
		t.Errorf("daytona pool model %q id %q grader %q, want anthropic with the pool's id and grader model", daytona["MANGO_MODEL"],
			daytona["MANGO_MODEL_ID"], daytona["MANGO_OUTCOME_GRADER_MODEL"])
	}
	if got := daytona["MANGO_SELF_HOSTED_TOOL_TIMEOUT"]; got != "5m" {
		t.Errorf("daytona pool MANGO_SELF_HOSTED_TOOL_TIMEOUT = %q, want the pool's 5m", got)
	}
	docker := find[*appsv1.Deployment](t, r, "mango-worker-docker")
	if got := mountedAt(&docker.Spec.Template, docker.Spec.Template.Spec.Containers[0], "/etc/mango/docker"); got != "secret:registry-credentials" {
		t.Errorf("docker pool DOCKER_CONFIG directory is %q, want the registry credentials", got)
	}
}

func checkDevRender(t *testing.T, r *rendered) {
	want := map[string]bool{"mango-database": true, "mango-worker-token": false, "mango-api-key": false, "mango-model": false, "mango-vault-keys": false}
	for _, o := range r.Objects {
		s, ok := o.Obj.(*corev1.Secret)
		if !ok {
			continue
		}
		hook, known := want[s.Name]
		if !known {
			t.Errorf("unexpected Secret %s", s.Name)
			continue
		}
		delete(want, s.Name)
		if o.Hook != hook {
			t.Errorf("Secret %s: hook = %v, want %v", s.Name, o.Hook, hook)
		}
	}
	if len(want) > 0 {
		t.Errorf("Secrets not made from values: %v", want)
	}
	docker := effectiveEnv(t, r, find[*appsv1.Deployment](t, r, "mango-worker-docker").Spec.Template.Spec.Containers[0])
	if docker["MANGO_MODEL_API_KEY"] != "secret:mango-model/api-key" {
		t.Errorf("docker pool MANGO_MODEL_API_KEY = %q, want the chart's model Secret", docker["MANGO_MODEL_API_KEY"])
	}
	if !strings.Contains(r.Notes, "WARNING: pool docker mounts its node's Docker socket") {
		t.Errorf("NOTES do not warn about the Docker socket:\n%s", r.Notes)
	}
}
