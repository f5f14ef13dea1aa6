{{/*
Standard helpers: name, fullname, chart, labels, selectorLabels,
serviceAccountName, image.
*/}}

{{/* Chart name, overridable with nameOverride. */}}
{{- define "mango.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name, the prefix of every resource. It is truncated to
leave room for the longest fixed suffix ("-worker-token", 13 characters).
*/}}
{{- define "mango.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Chart name and version, for the helm.sh/chart label. */}}
{{- define "mango.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every resource. */}}
{{- define "mango.labels" -}}
helm.sh/chart: {{ include "mango.chart" . }}
{{ include "mango.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mango
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels shared by every component; each adds app.kubernetes.io/component. */}}
{{- define "mango.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mango.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Name of a component's ServiceAccount.
Usage: include "mango.serviceAccountName" (dict "serviceAccount" $sa "default" $name)
*/}}
{{- define "mango.serviceAccountName" -}}
{{- if .serviceAccount.create }}
{{- default .default .serviceAccount.name }}
{{- else }}
{{- default "default" .serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Image reference: repository@digest, else repository:tag (tag defaulting to
the chart's appVersion).
Usage: include "mango.image" (dict "root" $ "image" $image)
*/}}
{{- define "mango.image" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag | toString) }}
{{- end }}
{{- end }}

{{/* Names of the components' resources. */}}
{{- define "mango.apiServer.fullname" -}}
{{- printf "%s-api-server" (include "mango.fullname" .) }}
{{- end }}

{{- define "mango.migrate.fullname" -}}
{{- printf "%s-migrate" (include "mango.fullname" .) }}
{{- end }}

{{/*
Secret references. Each returns a dict {name, key, create, optional} as
YAML: name is existingSecret or "<fullname>-<purpose>"; create reports that
the chart makes the Secret from a value.
Usage: include "mango.secretRef" (dict "root" $ "ref" .Values.database "purpose" "database" "valueKey" "url") | fromYaml
*/}}
{{- define "mango.secretRef" -}}
{{- $value := get .ref .valueKey | default "" }}
{{- if and .ref.existingSecret $value }}
{{- fail (printf "%s: set either existingSecret or %s, not both" .path .valueKey) }}
{{- end }}
name: {{ default (printf "%s-%s" (include "mango.fullname" .root) .purpose) .ref.existingSecret | quote }}
key: {{ .ref.existingSecretKey | quote }}
create: {{ not (empty $value) }}
value: {{ $value | quote }}
{{- end }}

{{- define "mango.databaseSecret" -}}
{{- include "mango.secretRef" (dict "root" . "ref" .Values.database "purpose" "database" "valueKey" "url" "path" "database") }}
{{- end }}

{{- define "mango.apiKeySecret" -}}
{{- include "mango.secretRef" (dict "root" . "ref" .Values.apiKey "purpose" "api-key" "valueKey" "value" "path" "apiKey") }}
{{- end }}

{{- define "mango.workerTokenSecret" -}}
{{- include "mango.secretRef" (dict "root" . "ref" .Values.workerToken "purpose" "worker-token" "valueKey" "value" "path" "workerToken") }}
{{- end }}

{{/*
The vault keys' Secret. A development value is checked here, in the
MANGO_VAULT_KEYS format, with errors that name an entry by position and
never show a key (a schema pattern would print the value).
*/}}
{{- define "mango.vaultKeysSecret" -}}
{{- with .Values.vaultKeys.value }}
{{- range $i, $entry := splitList "," . }}
{{- if not (regexMatch "^[A-Za-z0-9._-]{1,64}:[A-Za-z0-9+/_-]{43}=?$" (trim $entry)) }}
{{- fail (printf "vaultKeys.value entry %d: want id:base64, an id of letters, digits, '.', '_' or '-' and a key of 32 bytes in base64" (add1 $i)) }}
{{- end }}
{{- end }}
{{- end }}
{{- include "mango.secretRef" (dict "root" . "ref" .Values.vaultKeys "purpose" "vault-keys" "valueKey" "value" "path" "vaultKeys") }}
{{- end }}

{{- define "mango.modelSecret" -}}
{{- include "mango.secretRef" (dict "root" . "ref" .Values.model.apiKey "purpose" "model" "valueKey" "value" "path" "model.apiKey") }}
{{- end }}

{{/* Host:port of the ControlPlane the workers dial: the api-server's gRPC Service. */}}
{{- define "mango.controlPlaneAddr" -}}
{{- printf "%s:%v" (include "mango.apiServer.fullname" .) .Values.apiServer.service.grpcPort }}
{{- end }}

{{/* Mount paths of the TLS Secrets. */}}
{{- define "mango.tls.temporalDir" -}}/etc/mango/tls/temporal{{- end }}
{{- define "mango.tls.controlPlaneDir" -}}/etc/mango/tls/controlplane{{- end }}

{{/* Temporal connection variables, shared by the api-server and the workers (ConfigMap data). */}}
{{- define "mango.temporalEnv" -}}
MANGO_TEMPORAL_HOSTPORT: {{ .Values.temporal.hostPort | quote }}
MANGO_TEMPORAL_NAMESPACE: {{ .Values.temporal.namespace | quote }}
MANGO_TASK_QUEUE_PREFIX: {{ .Values.taskQueuePrefix | quote }}
{{- with .Values.temporal.tls }}
{{- if .enabled }}
MANGO_TEMPORAL_TLS: "true"
{{- if and .existingSecret .ca }}
MANGO_TEMPORAL_TLS_CA_FILE: {{ printf "%s/ca.crt" (include "mango.tls.temporalDir" $) | quote }}
{{- end }}
{{- if and .existingSecret .clientCert }}
MANGO_TEMPORAL_TLS_CERT_FILE: {{ printf "%s/tls.crt" (include "mango.tls.temporalDir" $) | quote }}
MANGO_TEMPORAL_TLS_KEY_FILE: {{ printf "%s/tls.key" (include "mango.tls.temporalDir" $) | quote }}
{{- end }}
{{- with .serverName }}
MANGO_TEMPORAL_TLS_SERVER_NAME: {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Validation of the TLS settings shared by every component. */}}
{{- define "mango.validateTLS" -}}
{{- with .Values.temporal.tls }}
{{- if and .clientCert (not .existingSecret) }}
{{- fail "temporal.tls.clientCert needs temporal.tls.existingSecret (a Secret with tls.crt and tls.key)" }}
{{- end }}
{{- if and .existingSecret (not .enabled) }}
{{- fail "temporal.tls.existingSecret is set but temporal.tls.enabled is false" }}
{{- end }}
{{- end }}
{{- with .Values.controlPlane.tls }}
{{- if and .enabled (not .serverSecret) }}
{{- fail "controlPlane.tls.enabled needs controlPlane.tls.serverSecret (the api-server's tls.crt and tls.key)" }}
{{- end }}
{{- if and .enabled (not .clientSecret) }}
{{- fail "controlPlane.tls.enabled needs controlPlane.tls.clientSecret (the workers' ca.crt)" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Pod-level volumes shared by every component: /tmp and the Temporal TLS
Secret. Usage: include "mango.commonVolumes" $
*/}}
{{- define "mango.commonVolumes" -}}
- name: tmp
  emptyDir: {}
{{- if .Values.temporal.tls.existingSecret }}
- name: temporal-tls
  secret:
    secretName: {{ .Values.temporal.tls.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- end }}

{{- define "mango.commonVolumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if .Values.temporal.tls.existingSecret }}
- name: temporal-tls
  mountPath: {{ include "mango.tls.temporalDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{/*
HorizontalPodAutoscaler spec body for a Deployment.
Usage: include "mango.hpaSpec" (dict "name" $name "autoscaling" $as)
*/}}
{{- define "mango.hpaSpec" -}}
scaleTargetRef:
  apiVersion: apps/v1
  kind: Deployment
  name: {{ .name }}
minReplicas: {{ .autoscaling.minReplicas }}
maxReplicas: {{ .autoscaling.maxReplicas }}
{{- if not (or .autoscaling.targetCPUUtilizationPercentage .autoscaling.targetMemoryUtilizationPercentage) }}
{{- fail (printf "%s: autoscaling needs targetCPUUtilizationPercentage or targetMemoryUtilizationPercentage" .name) }}
{{- end }}
metrics:
  {{- with .autoscaling.targetCPUUtilizationPercentage }}
  - type: Resource
    resource:
      name: cpu
      target:
        type: Utilization
        averageUtilization: {{ . }}
  {{- end }}
  {{- with .autoscaling.targetMemoryUtilizationPercentage }}
  - type: Resource
    resource:
      name: memory
      target:
        type: Utilization
        averageUtilization: {{ . }}
  {{- end }}
{{- end }}

{{/*
PodDisruptionBudget minAvailable/maxUnavailable.
Usage: include "mango.pdbSpec" .podDisruptionBudget
*/}}
{{- define "mango.pdbSpec" -}}
{{- if not (kindIs "invalid" .maxUnavailable) }}
{{- if ne (toString .maxUnavailable) "" }}
maxUnavailable: {{ .maxUnavailable }}
{{- else }}
minAvailable: {{ .minAvailable }}
{{- end }}
{{- else }}
minAvailable: {{ .minAvailable }}
{{- end }}
{{- end }}

{{/*
The OTEL_* variables of a component from tracing (root: the chart's root
context; pool: a worker pool, or nil for the api-server), none when
tracing is off. The headers come from a Secret (mango.tracingSecretEnv).
*/}}
{{- define "mango.tracingEnv" -}}
{{- $t := .root.Values.tracing }}
{{- if $t.enabled }}
{{- if not $t.endpoint }}
{{- fail "tracing.enabled needs tracing.endpoint, the collector's OTLP URL (http://collector:4318 for http/protobuf, :4317 for grpc)" }}
{{- end }}
OTEL_EXPORTER_OTLP_ENDPOINT: {{ $t.endpoint | quote }}
OTEL_EXPORTER_OTLP_PROTOCOL: {{ $t.protocol | quote }}
OTEL_TRACES_SAMPLER: {{ $t.sampler | quote }}
OTEL_TRACES_SAMPLER_ARG: {{ $t.sampleRatio | toString | quote }}
{{- if eq $t.compression "gzip" }}
OTEL_EXPORTER_OTLP_COMPRESSION: "gzip"
{{- end }}
{{- $attrs := dict }}
{{- range $k, $v := $t.resourceAttributes }}
{{- $_ := set $attrs $k (toString $v) }}
{{- end }}
{{- with .pool }}
{{- $_ := set $attrs "mango.pool" .name }}
{{- end }}
{{- $pairs := list }}
{{- range $k := keys $attrs | sortAlpha }}
{{- $pairs = append $pairs (printf "%s=%s" $k (get $attrs $k | urlquery | replace "+" "%20")) }}
{{- end }}
{{- with $pairs }}
OTEL_RESOURCE_ATTRIBUTES: {{ join "," . | quote }}
{{- end }}
MANGO_OTEL_CAPTURE_CONTENT: {{ $t.captureContent | quote }}
{{- end }}
{{- end }}

{{/* The env entry of the exporter's headers Secret, when tracing has one. */}}
{{- define "mango.tracingSecretEnv" -}}
{{- $t := .Values.tracing }}
{{- if and $t.enabled $t.headersSecret.name }}
- name: OTEL_EXPORTER_OTLP_HEADERS
  valueFrom:
    secretKeyRef:
      name: {{ $t.headersSecret.name }}
      key: {{ $t.headersSecret.key }}
{{- end }}
{{- end }}
