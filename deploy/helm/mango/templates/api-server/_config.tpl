{{/* Labels of the api-server. */}}
{{- define "mango.apiServer.selectorLabels" -}}
{{ include "mango.selectorLabels" . }}
app.kubernetes.io/component: api-server
{{- end }}

{{- define "mango.apiServer.labels" -}}
{{ include "mango.labels" . }}
app.kubernetes.io/component: api-server
{{- end }}

{{/*
Session providers (MANGO_SANDBOX_PROVIDERS) and the default one
(MANGO_SANDBOX), as YAML {default, providers}: from apiServer when set,
else from the enabled pools.
*/}}
{{- define "mango.apiServer.providers" -}}
{{- $fromPools := list }}
{{- range (include "mango.pools" . | fromYamlArray) }}
{{- $fromPools = append $fromPools .provider }}
{{- end }}
{{- $fromPools = uniq $fromPools }}
{{- $providers := default $fromPools .Values.apiServer.sandboxProviders }}
{{- $default := .Values.apiServer.defaultSandbox }}
{{- if not $default }}
{{- if not $providers }}
{{- fail "no enabled worker pool: enable one in workerPools, or set apiServer.defaultSandbox and apiServer.sandboxProviders for workers deployed elsewhere" }}
{{- end }}
{{- $default = first $providers }}
{{- end }}
{{- if not $providers }}
{{- $providers = list $default }}
{{- end }}
{{- if not (has $default $providers) }}
{{- fail (printf "apiServer.defaultSandbox %q is not one of the session providers %s (apiServer.sandboxProviders, else the enabled pools' providers)" $default (join ", " $providers)) }}
{{- end }}
default: {{ $default | quote }}
providers: {{ toJson $providers }}
{{- end }}

{{/* ConfigMap data of the api-server: every non-secret variable. */}}
{{- define "mango.apiServer.config" -}}
{{- $providers := include "mango.apiServer.providers" . | fromYaml }}
{{- with .Values.apiServer }}
MANGO_HTTP_ADDR: "0.0.0.0:8080"
MANGO_GRPC_ADDR: "0.0.0.0:8081"
{{ include "mango.temporalEnv" $ }}
MANGO_SANDBOX: {{ $providers.default | quote }}
MANGO_SANDBOX_PROVIDERS: {{ join "," $providers.providers | quote }}
MANGO_DATABASE_MAX_CONNS: {{ $.Values.database.maxConns | quote }}
MANGO_REQUIRE_LIVE_WORKER: {{ .requireLiveWorker | quote }}
{{- with .hostGoneAfter }}
MANGO_HOST_GONE_AFTER: {{ . | quote }}
{{- end }}
{{- with .workLeaseTTL }}
MANGO_WORK_LEASE_TTL: {{ . | quote }}
{{- end }}
{{- with .workMaxLeaseTTL }}
MANGO_WORK_MAX_LEASE_TTL: {{ . | quote }}
{{- end }}
MANGO_AUTO_MIGRATE: {{ .autoMigrate | quote }}
MANGO_SHUTDOWN_TIMEOUT: {{ printf "%vs" .shutdownGraceSeconds | quote }}
MANGO_LOG_LEVEL: {{ .log.level | quote }}
MANGO_LOG_FORMAT: {{ .log.format | quote }}
{{- end }}
MANGO_MCP_ALLOW_PRIVATE: {{ .Values.mcp.allowPrivateNetworks | quote }}
{{- with .Values.webhooks }}
MANGO_WEBHOOK_ALLOW_PRIVATE: {{ .allowPrivateNetworks | quote }}
MANGO_WEBHOOK_RETRY_MAX: {{ .retryMax | quote }}
{{- end }}
{{- with .Values.deployments }}
MANGO_DEPLOYMENT_CATCHUP_WINDOW: {{ .catchupWindow | quote }}
{{- end }}
{{- with include "mango.tracingEnv" (dict "root" $) }}
{{ . }}
{{- end }}
{{- with .Values.console }}
MANGO_CONSOLE: {{ .enabled | quote }}
MANGO_CONSOLE_SIGNIN_TTL: {{ .signInTTL | quote }}
{{- end }}
{{- with .Values.skills }}
MANGO_SKILLS_MAX_BYTES: {{ .maxBytes | int64 | quote }}
MANGO_SKILLS_MAX_FILES: {{ .maxFiles | int64 | quote }}
{{- with .catalog }}
MANGO_SKILLS_CATALOG: {{ . | quote }}
{{- end }}
{{- end }}
{{- with .Values.files }}
MANGO_FILES_MAX_BYTES: {{ .maxBytes | int64 | quote }}
MANGO_FILES_DOWNLOAD_UPLOADS: {{ .downloadUploads | quote }}
{{- with .s3 }}
{{- if .enabled }}
MANGO_FILES_S3_ENDPOINT: {{ .endpoint | quote }}
MANGO_FILES_S3_BUCKET: {{ .bucket | quote }}
{{- with .region }}
MANGO_FILES_S3_REGION: {{ . | quote }}
{{- end }}
MANGO_FILES_S3_PATH_STYLE: {{ .pathStyle | quote }}
{{- with .prefix }}
MANGO_FILES_S3_PREFIX: {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.controlPlane.tls }}
{{- if .enabled }}
MANGO_GRPC_TLS_CERT_FILE: {{ printf "%s/tls.crt" (include "mango.tls.controlPlaneDir" $) | quote }}
MANGO_GRPC_TLS_KEY_FILE: {{ printf "%s/tls.key" (include "mango.tls.controlPlaneDir" $) | quote }}
{{- if .mutual }}
MANGO_GRPC_TLS_CLIENT_CA_FILE: {{ printf "%s/ca.crt" (include "mango.tls.controlPlaneDir" $) | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Secret references of the api-server, as YAML, for the checksum. */}}
{{- define "mango.apiServer.secrets" -}}
database: {{ include "mango.databaseSecret" . | fromYaml | toJson }}
workerToken: {{ include "mango.workerTokenSecret" . | fromYaml | toJson }}
apiKey: {{ include "mango.apiKeySecret" . | fromYaml | toJson }}
vaultKeys: {{ include "mango.vaultKeysSecret" . | fromYaml | toJson }}
filesS3Credentials: {{ include "mango.apiServer.s3Credentials" . | fromYaml | toJson }}
{{- end }}

{{/*
Static S3 credentials of the api-server, as YAML {name, accessKeyIdKey,
secretAccessKeyKey}; empty (the AWS default chain) unless files.s3 is
enabled with credentials.existingSecret. It fails on S3 settings (endpoint,
bucket, credentials) without files.s3.enabled.
*/}}
{{- define "mango.apiServer.s3Credentials" -}}
{{- $s3 := default dict .Values.files.s3 }}
{{- $cred := default dict $s3.credentials }}
{{- if not $s3.enabled }}
{{- range $k := list "endpoint" "bucket" }}
{{- if get $s3 $k }}
{{- fail (printf "files.s3.%s is set but files.s3.enabled is false" $k) }}
{{- end }}
{{- end }}
{{- if $cred.existingSecret }}
{{- fail "files.s3.credentials.existingSecret is set but files.s3.enabled is false" }}
{{- end }}
{{- end }}
{{- if and $s3.enabled $cred.existingSecret }}
name: {{ $cred.existingSecret | quote }}
accessKeyIdKey: {{ $cred.accessKeyIdKey | quote }}
secretAccessKeyKey: {{ $cred.secretAccessKeyKey | quote }}
{{- end }}
{{- end }}

{{/* The api-server's ServiceAccount name. */}}
{{- define "mango.apiServer.serviceAccountName" -}}
{{- include "mango.serviceAccountName" (dict "serviceAccount" .Values.apiServer.serviceAccount "default" (include "mango.apiServer.fullname" .)) }}
{{- end }}
