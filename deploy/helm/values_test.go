package helm_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestChartRejects renders values the chart must refuse: the schema
// catches misspelt keys and unknown names, the templates the combinations.
func TestChartRejects(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("p", 60)
	tests := []struct {
		name, values, want string
	}{
		{"real model with the default local pool", `model: {provider: anthropic}`,
			"a local pool with model.provider=anthropic is refused"},
		{"real model on a local pool", `workerPools: [{name: dev, provider: local, model: {provider: anthropic}}]`,
			"workerPools[0] (dev): a local pool with model.provider=anthropic is refused"},
		{"misspelt api-server key", `apiServer: {replica: 3}`,
			"additional properties 'replica' not allowed"},
		{"misspelt pool key", `workerPools: [{name: d, provider: docker, replica: 2}]`,
			"additional properties 'replica' not allowed"},
		{"misspelt top-level key", `workerPool: []`,
			"additional properties 'workerPool' not allowed"},
		{"unknown provider", `workerPools: [{name: p, provider: podman}]`,
			"/workerPools/0/provider"},
		{"pool name not a DNS label", `workerPools: [{name: Bad_Name, provider: docker}]`,
			"/workerPools/0/name"},
		{"unknown model", `model: {provider: openai}`,
			"/model/provider"},
		{"short API key", `apiKey: {value: short}`,
			"/apiKey/value"},
		{"k8s pool without its block", `workerPools: [{name: k, provider: k8s}]`,
			"missing property 'k8s'"},
		{"duplicate pool names", `workerPools: [{name: a, provider: docker}, {name: a, provider: e2b}]`,
			`the pool name "a" is used twice`},
		{"database URL in a pool", `workerPools: [{name: d, provider: docker, env: [{name: MANGO_DATABASE_URL, value: "postgres://x"}]}]`,
			"env must not set MANGO_DATABASE_URL"},
		{"provider chosen through env", `workerPools: [{name: d, provider: docker, env: [{name: MANGO_SANDBOX, value: local}]}]`,
			"env must not set MANGO_SANDBOX"},
		{"k8s pool without a router", `workerPools: [{name: k, provider: k8s, k8s: {image: rt}}]`,
			"needs k8s.routerURL"},
		{"k8s pool with image and warm pool", `workerPools: [{name: k, provider: k8s, k8s: {routerURL: "http://r", image: rt, warmPool: wp}}]`,
			"exactly one of k8s.image"},
		{"k8s Role bound to the default account", `workerPools: [{name: k, provider: k8s, serviceAccount: {create: false}, k8s: {routerURL: "http://r", image: rt}}]`,
			"default ServiceAccount"},
		{"docker block on an e2b pool", `workerPools: [{name: e, provider: e2b, docker: {host: "tcp://d:2375"}}]`,
			"the docker block applies only to provider docker"},
		{"docker host and socket", `workerPools: [{name: d, provider: docker, docker: {host: "tcp://d:2375", socket: {enabled: true}}}]`,
			"set docker.host or docker.socket.enabled, not both"},
		{"docker warm pool too large", `workerPools: [{name: d, provider: docker, docker: {warmPool: 65}}]`,
			"/workerPools/0/docker/warmPool"},
		{"worker grace below its drain time", `workerDefaults: {shutdownGraceSeconds: 40}`,
			"terminationGracePeriodSeconds (35) must exceed shutdownGraceSeconds (40)"},
		{"api-server grace below its drain time", `apiServer: {terminationGracePeriodSeconds: 20}`,
			"apiServer: terminationGracePeriodSeconds (20) must exceed shutdownGraceSeconds (25)"},
		{"pool name too long for Kubernetes", fmt.Sprintf(`workerPools: [{name: %s, provider: docker}]`, long),
			"more than Kubernetes' 63"},
		{"default provider without a pool", `apiServer: {defaultSandbox: e2b}`,
			`apiServer.defaultSandbox "e2b" is not one of the session providers local`},
		{"no pool and no default", `workerPools: []`,
			"no enabled worker pool"},
		{"ControlPlane TLS without the server Secret", `controlPlane: {tls: {enabled: true, clientSecret: c}}`,
			"needs controlPlane.tls.serverSecret"},
		{"ControlPlane TLS without the client Secret", `controlPlane: {tls: {enabled: true, serverSecret: s}}`,
			"needs controlPlane.tls.clientSecret"},
		{"Temporal client certificate without a Secret", `temporal: {tls: {enabled: true, clientCert: true}}`,
			"temporal.tls.clientCert needs temporal.tls.existingSecret"},
		{"database Secret and URL", `database: {existingSecret: pg, url: "postgres://u:p@h/db"}`,
			"database: set either existingSecret or url, not both"},
		{"autoscaling without a target", `apiServer: {autoscaling: {enabled: true, targetCPUUtilizationPercentage: 0}}`,
			"autoscaling needs targetCPUUtilizationPercentage or targetMemoryUtilizationPercentage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := renderChart(yamlValues(t, tt.values))
			if err == nil {
				t.Fatalf("values %s rendered; want an error containing %q", tt.values, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("values %s: error\n  %v\nwant it to contain %q", tt.values, err, tt.want)
			}
		})
	}
}

// TestLocalPoolUnsafeOverride: allowUnsafeLocalSandbox lets a real model
// run with a local pool, and says so to the worker and the operator.
func TestLocalPoolUnsafeOverride(t *testing.T) {
	t.Parallel()
	r := mustRender(t, yamlValues(t, `
model: {provider: anthropic}
workerPools: [{name: dev, provider: local, allowUnsafeLocalSandbox: true}]`))
	env := effectiveEnv(t, r, find[*appsv1.Deployment](t, r, "mango-worker-dev").Spec.Template.Spec.Containers[0])
	for k, want := range map[string]string{
		"MANGO_SANDBOX":                    "local",
		"MANGO_MODEL":                      "anthropic",
		"MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX": "1",
		"MANGO_MODEL_API_KEY":              "secret:mango-model/api-key",
	} {
		if env[k] != want {
			t.Errorf("%s = %q, want %q", k, env[k], want)
		}
	}
	if !strings.Contains(r.Notes, "WARNING: pool dev allows a real model with the local sandbox") {
		t.Errorf("NOTES do not warn about the unsafe local pool:\n%s", r.Notes)
	}
}

// TestChartChecksumsFollowConfig: a change of configuration or of a
// secret reference changes the checksum annotations, so pods roll.
func TestChartChecksumsFollowConfig(t *testing.T) {
	t.Parallel()
	sums := func(values string) map[string]string {
		r := mustRender(t, yamlValues(t, values))
		out := map[string]string{}
		for _, d := range all[*appsv1.Deployment](r) {
			for _, k := range []string{"checksum/config", "checksum/secret"} {
				out[d.Name+" "+k] = d.Spec.Template.Annotations[k]
			}
		}
		return out
	}
	base := sums(`{}`)
	tests := []struct {
		name, values string
		changed      []string
	}{
		{"Temporal address", `temporal: {hostPort: "temporal.other:7233"}`,
			[]string{"mango-api-server checksum/config", "mango-worker-local checksum/config"}},
		{"api-server log level", `apiServer: {log: {level: debug}}`,
			[]string{"mango-api-server checksum/config"}},
		{"worker token Secret", `workerToken: {existingSecret: other-token}`,
			[]string{"mango-api-server checksum/secret", "mango-worker-local checksum/secret"}},
		{"worker token value", `workerToken: {value: another-token-0123456789}`,
			[]string{"mango-api-server checksum/secret", "mango-worker-local checksum/secret"}},
		{"database URL", `database: {url: "postgres://u:p@db/mango"}`,
			[]string{"mango-api-server checksum/secret"}},
		{"vault keys Secret", `vaultKeys: {existingSecret: vault-2}`,
			[]string{"mango-api-server checksum/secret"}},
		{"vault keys value", `vaultKeys: {value: "k1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}`,
			[]string{"mango-api-server checksum/secret"}},
		{"Files size", `files: {maxBytes: 1048576}`,
			[]string{"mango-api-server checksum/config"}},
		{"S3 with static credentials", `files: {s3: {enabled: true, endpoint: "http://minio:9000", bucket: b, credentials: {existingSecret: minio}}}`,
			[]string{"mango-api-server checksum/config", "mango-api-server checksum/secret"}},
		{"outputs limits", `workerDefaults: {outputs: {maxFiles: 10}}`,
			[]string{"mango-worker-local checksum/config"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := sums(tt.values)
			for k, v := range base {
				want := !slices.Contains(tt.changed, k)
				if (got[k] == v) != want {
					t.Errorf("%s: %s changed = %v, want %v (before %s, after %s)", tt.values, k, got[k] != v, !want, v, got[k])
				}
			}
		})
	}
}

// TestChartK8sPoolRBAC: the Role grants exactly the kind of the pool's
// mode, in the sandbox namespace (the release's by default).
func TestChartK8sPoolRBAC(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, k8s, namespace string
		rule                 rbacv1.PolicyRule
	}{
		{"image mode", `{routerURL: "http://router:8080", image: rt}`, releaseNamespace,
			rbacv1.PolicyRule{APIGroups: []string{"agents.x-k8s.io"}, Resources: []string{"sandboxes"}, Verbs: k8sVerbs}},
		{"warm pool mode", `{routerURL: "http://router:8080", warmPool: python, namespace: sandboxes}`, "sandboxes",
			rbacv1.PolicyRule{APIGroups: []string{"extensions.agents.x-k8s.io"}, Resources: []string{"sandboxclaims"}, Verbs: k8sVerbs}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := mustRender(t, yamlValues(t, `workerPools: [{name: kube, provider: k8s, k8s: `+tt.k8s+`}]`))
			role := find[*rbacv1.Role](t, r, "mango-worker-kube")
			if role.Namespace != tt.namespace || len(role.Rules) != 1 || fmt.Sprint(role.Rules[0]) != fmt.Sprint(tt.rule) {
				t.Errorf("Role in %q with rules %+v, want in %q exactly %+v", role.Namespace, role.Rules, tt.namespace, tt.rule)
			}
			env := effectiveEnv(t, r, find[*appsv1.Deployment](t, r, "mango-worker-kube").Spec.Template.Spec.Containers[0])
			if env["MANGO_K8S_NAMESPACE"] != tt.namespace {
				t.Errorf("MANGO_K8S_NAMESPACE = %q, want %q", env["MANGO_K8S_NAMESPACE"], tt.namespace)
			}
		})
	}
	t.Run("rbac off", func(t *testing.T) {
		t.Parallel()
		r := mustRender(t, yamlValues(t, `workerPools: [{name: kube, provider: k8s, k8s: {routerURL: "http://r", image: rt, rbac: {create: false}}}]`))
		if n := len(all[*rbacv1.Role](r)); n != 0 {
			t.Errorf("k8s.rbac.create false still renders %d Roles", n)
		}
	})
}

// TestChartLongNames: a long fullname is truncated so that every name
// still fits Kubernetes' 63 characters.
func TestChartLongNames(t *testing.T) {
	t.Parallel()
	r := mustRender(t, yamlValues(t, `fullnameOverride: `+strings.Repeat("n", 70)+`
workerPools: [{name: loc, provider: local}]`))
	for _, o := range r.Objects {
		if len(o.Name) > 63 {
			t.Errorf("%s %s: %d characters, more than 63", o.Kind, o.Name, len(o.Name))
		}
	}
	svc := all[*corev1.Service](r)
	if len(svc) != 1 || !strings.HasSuffix(svc[0].Name, "-api-server") {
		t.Errorf("Services %v, want one ending in -api-server", svc)
	}
}

// TestChartValuesDocumented: every key of values.yaml has a comment right
// above it, or is an object whose keys all have one. A commented object or
// list (a Kubernetes type passed through, like resources) is documented as
// a whole.
func TestChartValuesDocumented(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	key := regexp.MustCompile(`^( *)([A-Za-z][A-Za-z0-9]*):(.*)$`)
	lines := strings.Split(string(b), "\n")
	skipIndent := -1 // inside a list or a documented object under a key at this indentation
	keys := 0
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		indent := len(line) - len(strings.TrimLeft(line, " "))
		if skipIndent >= 0 && indent > skipIndent {
			continue // documented by the key above
		}
		skipIndent = -1
		m := key.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("values.yaml:%d: unexpected line %q", i+1, line)
			continue
		}
		documented := i > 0 && strings.HasPrefix(strings.TrimSpace(lines[i-1]), "#")
		nested := strings.TrimSpace(m[3]) == ""
		isList := nested && i+1 < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i+1]), "- ")
		switch {
		case nested && !isList && !documented:
			continue // an object: its keys carry the comments
		case nested:
			skipIndent = indent
		}
		keys++
		if !documented {
			t.Errorf("values.yaml:%d: %s has no comment above it", i+1, m[2])
		}
	}
	if keys < 60 {
		t.Errorf("found %d documented keys in values.yaml; the check is not reading the file it should", keys)
	}
}
