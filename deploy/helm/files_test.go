package helm_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// Defaults of the api-server's Files and of the workers' outputs limits
// (api-server/internal/config, execution-worker/internal/config).
const (
	defaultFilesMaxBytes   = "524288000"
	defaultOutputsMaxFiles = "100"
	defaultOutputsMaxBytes = "1073741824"
)

// secretVars are the variables whose values are secrets: they come from a
// secretKeyRef, never from a ConfigMap.
var secretVars = []string{"MANGO_VAULT_KEYS", "MANGO_FILES_S3_ACCESS_KEY_ID", "MANGO_FILES_S3_SECRET_ACCESS_KEY"}

// num formats a number of the values (float64 once parsed) as an integer.
func num(v any) string {
	switch n := v.(type) {
	case float64:
		return strconv.FormatInt(int64(n), 10)
	case int64:
		return strconv.FormatInt(n, 10)
	case int:
		return strconv.Itoa(n)
	}
	return fmt.Sprint(v)
}

// checkVaultAndFiles: the vault keys reach the api-server, only it and only
// from a Secret; the Files settings are in its ConfigMap, the S3
// credentials from a Secret; every pool has its outputs limits.
func checkVaultAndFiles(t *testing.T, r *rendered, vals map[string]any, api apiServerFacts) {
	t.Helper()
	vaultName, vaultValue := checkVaultKeys(t, r, vals, api)
	checkConfigMapsHoldNoSecret(t, r, vaultValue)
	checkNoVaultOutsideAPIServer(t, r, vals, vaultName)
	checkFilesSettings(t, vals, api)
}

// checkVaultKeys: the api-server reads the vault keys from their Secret,
// optional only without existingSecret and value. It returns the Secret's
// name and the keys' value (empty when not in the values).
func checkVaultKeys(t *testing.T, r *rendered, vals map[string]any, api apiServerFacts) (vaultName, vaultValue string) {
	t.Helper()
	vault, _ := vals["vaultKeys"].(map[string]any)
	vaultName = "mango-vault-keys"
	if s := dig(vals, "vaultKeys", "existingSecret"); s != "" {
		vaultName = s
	}
	vaultValue = dig(vals, "vaultKeys", "value")
	wantRef := "secret:" + vaultName + "/" + dig(vals, "vaultKeys", "existingSecretKey")
	if api.Env["MANGO_VAULT_KEYS"] != wantRef {
		t.Errorf("api-server MANGO_VAULT_KEYS = %q, want %q", api.Env["MANGO_VAULT_KEYS"], wantRef)
	}
	d := find[*appsv1.Deployment](t, r, apiServerName)
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name != "MANGO_VAULT_KEYS" {
			continue
		}
		wantOptional := vault["existingSecret"] == "" && vaultValue == ""
		if got := e.ValueFrom.SecretKeyRef.Optional; got == nil || *got != wantOptional {
			t.Errorf("api-server MANGO_VAULT_KEYS optional = %s, want %v (optional only without existingSecret and value)", deref(got), wantOptional)
		}
	}
	return vaultName, vaultValue
}

// checkConfigMapsHoldNoSecret: no secret in a ConfigMap, under its name or
// as a value.
func checkConfigMapsHoldNoSecret(t *testing.T, r *rendered, vaultValue string) {
	t.Helper()
	for _, cm := range all[*corev1.ConfigMap](r) {
		for _, k := range secretVars {
			if _, ok := cm.Data[k]; ok {
				t.Errorf("ConfigMap %s holds %s; want it only from a Secret", cm.Name, k)
			}
		}
		for k, v := range cm.Data {
			if vaultValue != "" && strings.Contains(v, vaultValue) {
				t.Errorf("ConfigMap %s: %s holds the vault keys", cm.Name, k)
			}
		}
	}
}

// checkNoVaultOutsideAPIServer: neither the workers nor the migration Job
// get the keys or the Files settings; every worker has its outputs limits.
func checkNoVaultOutsideAPIServer(t *testing.T, r *rendered, vals map[string]any, vaultName string) {
	t.Helper()
	for _, p := range expectedPools(t, vals) {
		w := find[*appsv1.Deployment](t, r, "mango-worker-"+p.Name)
		checkNoVault(t, r, w.Name, vaultName, w.Spec.Template.Spec.Containers[0], w.Spec.Template.Spec)
		env := effectiveEnv(t, r, w.Spec.Template.Spec.Containers[0])
		for _, k := range []string{"MANGO_OUTPUTS_MAX_FILES", "MANGO_OUTPUTS_MAX_BYTES"} {
			if n, err := strconv.ParseInt(env[k], 10, 64); err != nil || n < 1 {
				t.Errorf("%s: %s = %q, want a positive integer", w.Name, k, env[k])
			}
		}
	}
	for _, j := range all[*batchv1.Job](r) {
		checkNoVault(t, r, "Job "+j.Name, vaultName, j.Spec.Template.Spec.Containers[0], j.Spec.Template.Spec)
	}
}

// checkNoVault: container c of a pod (what) gets neither the vault keys,
// by env, envFrom or volume, nor the Files settings.
func checkNoVault(t *testing.T, r *rendered, what, vaultName string, c corev1.Container, spec corev1.PodSpec) {
	t.Helper()
	for k, v := range effectiveEnv(t, r, c) {
		if k == "MANGO_VAULT_KEYS" || strings.HasPrefix(k, "MANGO_FILES_") || strings.HasPrefix(v, "secret:"+vaultName+"/") {
			t.Errorf("%s: %s=%q, want no vault keys and no Files settings", what, k, v)
		}
	}
	for _, ef := range c.EnvFrom {
		if ef.SecretRef != nil && ef.SecretRef.Name == vaultName {
			t.Errorf("%s: envFrom the vault keys Secret %s", what, vaultName)
		}
	}
	for _, v := range spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == vaultName {
			t.Errorf("%s: mounts the vault keys Secret %s", what, vaultName)
		}
	}
}

// checkFilesSettings: the Files settings of the api-server, S3 ones only
// with files.s3 enabled, its credentials from their Secret.
func checkFilesSettings(t *testing.T, vals map[string]any, api apiServerFacts) {
	t.Helper()
	files, _ := vals["files"].(map[string]any)
	if got, want := api.Env["MANGO_FILES_MAX_BYTES"], num(files["maxBytes"]); got != want {
		t.Errorf("api-server MANGO_FILES_MAX_BYTES = %q, want %q", got, want)
	}
	if got, want := api.Env["MANGO_FILES_DOWNLOAD_UPLOADS"], fmt.Sprint(files["downloadUploads"]); got != want {
		t.Errorf("api-server MANGO_FILES_DOWNLOAD_UPLOADS = %q, want %q", got, want)
	}
	skills, _ := vals["skills"].(map[string]any)
	for k, key := range map[string]string{"MANGO_SKILLS_MAX_BYTES": "maxBytes", "MANGO_SKILLS_MAX_FILES": "maxFiles"} {
		if got, want := api.Env[k], num(skills[key]); got != want {
			t.Errorf("api-server %s = %q, want %q (skills.%s)", k, got, want, key)
		}
	}
	catalog, set := api.Env["MANGO_SKILLS_CATALOG"]
	if want, _ := skills["catalog"].(string); catalog != want || set != (want != "") {
		t.Errorf("api-server MANGO_SKILLS_CATALOG = %q (set: %t), want %q (skills.catalog; unset when empty)", catalog, set, want)
	}
	s3, _ := files["s3"].(map[string]any)
	if s3["enabled"] != true {
		for k, v := range api.Env {
			if strings.HasPrefix(k, "MANGO_FILES_S3_") {
				t.Errorf("api-server %s=%q with files.s3 disabled; any of them selects S3", k, v)
			}
		}
		return
	}
	for k, want := range map[string]string{
		"MANGO_FILES_S3_ENDPOINT":   dig(vals, "files", "s3", "endpoint"),
		"MANGO_FILES_S3_BUCKET":     dig(vals, "files", "s3", "bucket"),
		"MANGO_FILES_S3_REGION":     dig(vals, "files", "s3", "region"),
		"MANGO_FILES_S3_PREFIX":     dig(vals, "files", "s3", "prefix"),
		"MANGO_FILES_S3_PATH_STYLE": fmt.Sprint(s3["pathStyle"]),
	} {
		if api.Env[k] != want {
			t.Errorf("api-server %s = %q, want %q", k, api.Env[k], want)
		}
	}
	cred := dig(vals, "files", "s3", "credentials", "existingSecret")
	for k, key := range map[string]string{
		"MANGO_FILES_S3_ACCESS_KEY_ID":     dig(vals, "files", "s3", "credentials", "accessKeyIdKey"),
		"MANGO_FILES_S3_SECRET_ACCESS_KEY": dig(vals, "files", "s3", "credentials", "secretAccessKeyKey"),
	} {
		want := ""
		if cred != "" {
			want = "secret:" + cred + "/" + key
		}
		if api.Env[k] != want {
			t.Errorf("api-server %s = %q, want %q", k, api.Env[k], want)
		}
	}
}

// checkFilesRender: ci/files-values.yaml.
func checkFilesRender(t *testing.T, r *rendered) {
	api := effectiveEnv(t, r, find[*appsv1.Deployment](t, r, apiServerName).Spec.Template.Spec.Containers[0])
	for k, want := range map[string]string{
		"MANGO_VAULT_KEYS":                 "secret:mango-vault/keys",
		"MANGO_FILES_MAX_BYTES":            "2147483648",
		"MANGO_FILES_DOWNLOAD_UPLOADS":     "true",
		"MANGO_FILES_S3_ENDPOINT":          "http://minio.storage.svc:9000",
		"MANGO_FILES_S3_BUCKET":            "mango-files",
		"MANGO_FILES_S3_REGION":            "us-east-1",
		"MANGO_FILES_S3_PATH_STYLE":        "true",
		"MANGO_FILES_S3_PREFIX":            "prod/files/",
		"MANGO_FILES_S3_ACCESS_KEY_ID":     "secret:mango-minio/root-user",
		"MANGO_FILES_S3_SECRET_ACCESS_KEY": "secret:mango-minio/root-password",
	} {
		if api[k] != want {
			t.Errorf("api-server %s = %q, want %q", k, api[k], want)
		}
	}
	for pool, want := range map[string][2]string{
		"docker": {"50", "4294967296"},           // the defaults' maxFiles, the pool's maxBytes
		"e2b":    {"50", defaultOutputsMaxBytes}, // the defaults' maxFiles, the chart's maxBytes
	} {
		env := effectiveEnv(t, r, find[*appsv1.Deployment](t, r, "mango-worker-"+pool).Spec.Template.Spec.Containers[0])
		if env["MANGO_OUTPUTS_MAX_FILES"] != want[0] || env["MANGO_OUTPUTS_MAX_BYTES"] != want[1] {
			t.Errorf("pool %s: MANGO_OUTPUTS_MAX_FILES=%q MANGO_OUTPUTS_MAX_BYTES=%q, want %s and %s",
				pool, env["MANGO_OUTPUTS_MAX_FILES"], env["MANGO_OUTPUTS_MAX_BYTES"], want[0], want[1])
		}
	}
	if n := len(all[*corev1.Secret](r)); n != 0 {
		t.Errorf("files values create %d Secrets, want none (all by reference)", n)
	}
	for _, want := range []string{"vault keys    Secret mango-vault, key keys\n", "S3 files      Secret mango-minio, keys root-user and root-password",
		"Files are stored in bucket mango-files at http://minio.storage.svc:9000, which the worker pods should reach too"} {
		if !strings.Contains(r.Notes, want) {
			t.Errorf("NOTES lack %q:\n%s", want, r.Notes)
		}
	}
}

// TestChartFilesDefaults: without values the api-server stores Files in
// PostgreSQL with the server's defaults, reads the vault keys from an
// optional reference, and every pool has the workers' default outputs limits.
func TestChartFilesDefaults(t *testing.T) {
	t.Parallel()
	r := mustRender(t, nil)
	api := effectiveEnv(t, r, find[*appsv1.Deployment](t, r, apiServerName).Spec.Template.Spec.Containers[0])
	for k, want := range map[string]string{
		"MANGO_VAULT_KEYS":             "secret:mango-vault-keys/vault-keys",
		"MANGO_FILES_MAX_BYTES":        defaultFilesMaxBytes,
		"MANGO_FILES_DOWNLOAD_UPLOADS": "false",
	} {
		if api[k] != want {
			t.Errorf("api-server %s = %q, want %q", k, api[k], want)
		}
	}
	w := effectiveEnv(t, r, find[*appsv1.Deployment](t, r, "mango-worker-local").Spec.Template.Spec.Containers[0])
	if w["MANGO_OUTPUTS_MAX_FILES"] != defaultOutputsMaxFiles || w["MANGO_OUTPUTS_MAX_BYTES"] != defaultOutputsMaxBytes {
		t.Errorf("local pool MANGO_OUTPUTS_MAX_FILES=%q MANGO_OUTPUTS_MAX_BYTES=%q, want the workers' defaults %s and %s",
			w["MANGO_OUTPUTS_MAX_FILES"], w["MANGO_OUTPUTS_MAX_BYTES"], defaultOutputsMaxFiles, defaultOutputsMaxBytes)
	}
	for _, want := range []string{"(optional: without it the api-server refuses to store secrets)", "Files are stored in PostgreSQL."} {
		if !strings.Contains(r.Notes, want) {
			t.Errorf("NOTES lack %q:\n%s", want, r.Notes)
		}
	}
}

// TestChartFilesS3WithoutStaticCredentials: S3 without a credentials
// Secret gives the api-server no static keys, so it uses the pod's IAM role.
func TestChartFilesS3WithoutStaticCredentials(t *testing.T) {
	t.Parallel()
	r := mustRender(t, yamlValues(t, `files: {s3: {enabled: true, endpoint: "https://s3.eu-west-1.amazonaws.com", bucket: b}}`))
	api := effectiveEnv(t, r, find[*appsv1.Deployment](t, r, apiServerName).Spec.Template.Spec.Containers[0])
	for _, k := range []string{"MANGO_FILES_S3_ACCESS_KEY_ID", "MANGO_FILES_S3_SECRET_ACCESS_KEY", "MANGO_FILES_S3_REGION", "MANGO_FILES_S3_PREFIX"} {
		if v, ok := api[k]; ok {
			t.Errorf("api-server %s = %q, want it unset", k, v)
		}
	}
	if api["MANGO_FILES_S3_BUCKET"] != "b" || api["MANGO_FILES_S3_PATH_STYLE"] != "false" {
		t.Errorf("api-server MANGO_FILES_S3_BUCKET=%q MANGO_FILES_S3_PATH_STYLE=%q, want b and false", api["MANGO_FILES_S3_BUCKET"], api["MANGO_FILES_S3_PATH_STYLE"])
	}
	if !strings.Contains(r.Notes, "the pod's AWS default credentials (IAM role)") {
		t.Errorf("NOTES do not say which credentials reach S3:\n%s", r.Notes)
	}
}

// keyMaterial is the start of the base64 of every vault key in the tests.
const keyMaterial = "MDEyMzQ1Njc4OWFiY2RlZ"

// TestChartFilesRejects: values of the vault keys, Files and outputs the
// chart must refuse.
func TestChartFilesRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, values, want string
	}{
		{"S3 without a bucket", `files: {s3: {enabled: true, endpoint: "http://minio:9000"}}`,
			"/files/s3/bucket"},
		{"S3 without an endpoint", `files: {s3: {enabled: true, bucket: b}}`,
			"/files/s3/endpoint"},
		{"S3 endpoint with a path", `files: {s3: {enabled: true, endpoint: "http://minio:9000/files", bucket: b}}`,
			"/files/s3/endpoint"},
		{"S3 endpoint without a scheme", `files: {s3: {enabled: true, endpoint: "minio:9000", bucket: b}}`,
			"/files/s3/endpoint"},
		{"S3 prefix with a leading slash", `files: {s3: {enabled: true, endpoint: "http://minio:9000", bucket: b, prefix: /files/}}`,
			"/files/s3/prefix"},
		{"S3 bucket without S3", `files: {s3: {endpoint: "http://minio:9000", bucket: b}}`,
			"files.s3.endpoint is set but files.s3.enabled is false"},
		{"S3 credentials without S3", `files: {s3: {credentials: {existingSecret: minio}}}`,
			"files.s3.credentials.existingSecret is set but files.s3.enabled is false"},
		{"misspelt S3 key", `files: {s3: {enabled: true, endpoint: "http://minio:9000", bucket: b, pathstyle: true}}`,
			"additional properties 'pathstyle' not allowed"},
		{"S3 credentials inline", `files: {s3: {credentials: {accessKeyId: AKIA}}}`,
			"additional properties 'accessKeyId' not allowed"},
		{"negative Files size", `files: {maxBytes: -1}`,
			"/files/maxBytes"},
		{"zero Files size", `files: {maxBytes: 0}`,
			"/files/maxBytes"},
		{"Files size not a number", `files: {maxBytes: 500Mi}`,
			"/files/maxBytes"},
		{"vault keys Secret and value", `vaultKeys: {existingSecret: v, value: "k1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}`,
			"vaultKeys: set either existingSecret or value, not both"},
		{"vault key without an id", `vaultKeys: {value: "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}`,
			"vaultKeys.value entry 1: want id:base64"},
		{"second vault key of 16 bytes", `vaultKeys: {value: "k2:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=,k1:MDEyMzQ1Njc4OWFiY2RlZg=="}`,
			"vaultKeys.value entry 2: want id:base64"},
		{"vault keys on a pool", `workerPools: [{name: d, provider: docker, vaultKeys: {existingSecret: v}}]`,
			"additional properties 'vaultKeys' not allowed"},
		{"no outputs files", `workerDefaults: {outputs: {maxFiles: 0}}`,
			"/workerDefaults/outputs/maxFiles"},
		{"too many outputs files", `workerPools: [{name: d, provider: docker, outputs: {maxFiles: 100001}}]`,
			"/workerPools/0/outputs/maxFiles"},
		{"negative outputs bytes", `workerPools: [{name: d, provider: docker, outputs: {maxBytes: -5}}]`,
			"/workerPools/0/outputs/maxBytes"},
		{"misspelt outputs key", `workerPools: [{name: d, provider: docker, outputs: {maxFile: 5}}]`,
			"additional properties 'maxFile' not allowed"},
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
			if strings.Contains(err.Error(), keyMaterial) {
				t.Errorf("values %s: error %q shows the key material", tt.values, err)
			}
		})
	}
}

// TestChartFilesAccepts: valid vault key lists and S3 settings render.
func TestChartFilesAccepts(t *testing.T) {
	t.Parallel()
	for _, values := range []string{
		`vaultKeys: {value: "k2:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=, k1:ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA"}`,
		`files: {s3: {enabled: true, endpoint: "https://r2.example.com/", bucket: b, prefix: "a/b/"}}`,
		`files: {maxBytes: 1125899906842624}`,
	} {
		if _, err := renderChart(yamlValues(t, values)); err != nil {
			t.Errorf("values %s: %v, want them rendered", values, err)
		}
	}
}

// TestChartMCPAllowPrivate: mcp.allowPrivateNetworks sets
// MANGO_MCP_ALLOW_PRIVATE on the api-server (token refreshes) and every
// pool (MCP calls), off by default; anything but a boolean is refused.
func TestChartMCPAllowPrivate(t *testing.T) {
	t.Parallel()
	pools := []any{
		map[string]any{"name": "local", "provider": "local"},
		map[string]any{"name": "docker", "provider": "docker"},
	}
	for _, allow := range []bool{false, true} {
		vals := map[string]any{"workerPools": pools}
		if allow {
			vals["mcp"] = map[string]any{"allowPrivateNetworks": true}
		}
		r := mustRender(t, vals)
		want := fmt.Sprint(allow)
		if got := effectiveEnv(t, r, find[*appsv1.Deployment](t, r, apiServerName).Spec.Template.Spec.Containers[0])["MANGO_MCP_ALLOW_PRIVATE"]; got != want {
			t.Errorf("allowPrivateNetworks=%v: api-server MANGO_MCP_ALLOW_PRIVATE = %q, want %q", allow, got, want)
		}
		for _, name := range []string{"local", "docker"} {
			env := effectiveEnv(t, r, find[*appsv1.Deployment](t, r, "mango-worker-"+name).Spec.Template.Spec.Containers[0])
			if got := env["MANGO_MCP_ALLOW_PRIVATE"]; got != want {
				t.Errorf("allowPrivateNetworks=%v: pool %s MANGO_MCP_ALLOW_PRIVATE = %q, want %q", allow, name, got, want)
			}
		}
	}
	if _, err := renderChart(map[string]any{"mcp": map[string]any{"allowPrivateNetworks": "yes"}}); err == nil || !strings.Contains(err.Error(), "allowPrivateNetworks") {
		t.Errorf("a string allowPrivateNetworks: err = %v, want a schema error naming it", err)
	}
	if _, err := renderChart(map[string]any{"mcp": map[string]any{"allowPrivate": true}}); err == nil {
		t.Error("an unknown mcp key rendered; want a schema error")
	}
}
