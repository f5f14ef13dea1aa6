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
MANGO_AUTO_MIGRATE: {{ .autoMigrate | quote }}
MANGO_SHUTDOWN_TIMEOUT: {{ printf "%vs" .shutdownGraceSeconds | quote }}
MANGO_LOG_LEVEL: {{ .log.level | quote }}
MANGO_LOG_FORMAT: {{ .log.format | quote }}
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
{{- end }}

{{/* The api-server's ServiceAccount name. */}}
{{- define "mango.apiServer.serviceAccountName" -}}
{{- include "mango.serviceAccountName" (dict "serviceAccount" .Values.apiServer.serviceAccount "default" (include "mango.apiServer.fullname" .)) }}
{{- end }}
