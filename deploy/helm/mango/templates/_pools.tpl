{{/*
Worker pools: every entry of workerPools merged over workerDefaults (a key
set in the pool replaces the default's; for objects, each sub-key does),
validated, with computed fields:
  fullname  resource name, <fullname>-worker-<name>
  model     the top-level model with the pool's model over it
Only enabled pools are returned, as a YAML list.
Usage: include "mango.pools" . | fromYamlArray
*/}}
{{- define "mango.pools" -}}
{{- $root := . }}
{{- $pools := list }}
{{- $seen := dict }}
{{- $reserved := list "MANGO_DATABASE_URL" "MANGO_SANDBOX" "MANAGED_AGENT_SANDBOX" "MANGO_MODEL" "MANGO_MODEL_API_KEY" "MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX" "MANGO_WORKER_TOKEN" "MANGO_CONTROLPLANE_ADDR" "MANGO_METRICS_ADDR" "MANGO_TASK_QUEUE_PREFIX" }}
{{- range $i, $raw := .Values.workerPools }}
{{- $p := deepCopy $root.Values.workerDefaults }}
{{- range $k, $v := $raw }}
{{- if and (kindIs "map" $v) (kindIs "map" (get $p $k)) }}
{{- $m := deepCopy (get $p $k) }}
{{- range $k2, $v2 := $v }}
{{- $_ := set $m $k2 $v2 }}
{{- end }}
{{- $_ := set $p $k $m }}
{{- else }}
{{- $_ := set $p $k $v }}
{{- end }}
{{- end }}
{{- $where := printf "workerPools[%d] (%s)" $i $p.name }}
{{- if and (eq $p.provider "local") (not (dig "image" "repository" "" $raw)) }}
{{- $_ := set $p.image "repository" $p.localImageRepository }}
{{- end }}
{{- $_ := unset $p "localImageRepository" }}
{{- if hasKey $seen $p.name }}
{{- fail (printf "%s: the pool name %q is used twice" $where $p.name) }}
{{- end }}
{{- $_ := set $seen $p.name true }}
{{- $fullname := printf "%s-worker-%s" (include "mango.fullname" $root) $p.name }}
{{- if gt (len $fullname) 63 }}
{{- fail (printf "%s: the resource name %q is %d characters, more than Kubernetes' 63: shorten the pool name or fullnameOverride" $where $fullname (len $fullname)) }}
{{- end }}
{{- $_ := set $p "fullname" $fullname }}
{{- range $p.env }}
{{- if has .name $reserved }}
{{- fail (printf "%s: env must not set %s: the chart sets it from the pool's keys (provider, model, allowUnsafeLocalSandbox) and a worker never gets the database URL" $where .name) }}
{{- end }}
{{- end }}
{{- $poolModel := default dict $p.model }}
{{- $model := mergeOverwrite (deepCopy $root.Values.model) (deepCopy $poolModel) }}
{{- if dig "apiKey" "existingSecret" "" $poolModel }}
{{- $_ := set $model.apiKey "value" "" }}
{{- end }}
{{- $_ := set $p "model" $model }}
{{- $_ := set $p "modelSecret" (include "mango.secretRef" (dict "root" $root "ref" $model.apiKey "purpose" "model" "valueKey" "value" "path" (printf "%s model.apiKey" $where)) | fromYaml) }}
{{- if and (eq $p.provider "local") (ne $model.provider "fake") (not $p.allowUnsafeLocalSandbox) }}
{{- fail (printf "%s: a local pool with model.provider=%s is refused: a real model can be steered by the content it reads (web pages, files, tool output) into running arbitrary commands, and the local sandbox runs them inside the worker pod with no isolation. Use an isolated provider (docker, k8s, e2b, ...) or set allowUnsafeLocalSandbox: true on this pool to accept the risk" $where $model.provider) }}
{{- end }}
{{- range $block := list "docker" "k8s" "local" }}
{{- if and (hasKey $p $block) (ne $p.provider $block) }}
{{- fail (printf "%s: the %s block applies only to provider %s, not %s" $where $block $block $p.provider) }}
{{- end }}
{{- end }}
{{- if eq $p.provider "docker" }}
{{- $docker := default dict $p.docker }}
{{- $socket := default dict $docker.socket }}
{{- if and $socket.enabled $docker.host }}
{{- fail (printf "%s: set docker.host or docker.socket.enabled, not both" $where) }}
{{- end }}
{{- end }}
{{- if eq $p.provider "k8s" }}
{{- $k8s := default dict $p.k8s }}
{{- if not $k8s.routerURL }}
{{- fail (printf "%s: a k8s pool needs k8s.routerURL (the agent-sandbox router, MANGO_K8S_ROUTER_URL)" $where) }}
{{- end }}
{{- if eq (empty $k8s.image) (empty $k8s.warmPool) }}
{{- fail (printf "%s: a k8s pool needs exactly one of k8s.image (a Sandbox per session) and k8s.warmPool (a SandboxClaim per session)" $where) }}
{{- end }}
{{- $rbac := default dict $k8s.rbac }}
{{- if and (ne (toString $rbac.create) "false") (eq (include "mango.serviceAccountName" (dict "serviceAccount" $p.serviceAccount "default" $fullname)) "default") }}
{{- fail (printf "%s: the k8s pool's Role would be bound to the namespace's default ServiceAccount: keep serviceAccount.create or name one" $where) }}
{{- end }}
{{- end }}
{{- if le (int $p.terminationGracePeriodSeconds) (int $p.shutdownGraceSeconds) }}
{{- fail (printf "%s: terminationGracePeriodSeconds (%v) must exceed shutdownGraceSeconds (%v), or running turns are killed before they drain" $where $p.terminationGracePeriodSeconds $p.shutdownGraceSeconds) }}
{{- end }}
{{- if $p.enabled }}
{{- $pools = append $pools $p }}
{{- end }}
{{- end }}
{{- toYaml $pools }}
{{- end }}

{{/* Labels selecting one pool's pods. Usage: include "mango.worker.selectorLabels" (dict "root" $ "pool" $p) */}}
{{- define "mango.worker.selectorLabels" -}}
{{ include "mango.selectorLabels" .root }}
app.kubernetes.io/component: execution-worker
mango/worker-pool: {{ .pool.name }}
{{- end }}

{{- define "mango.worker.labels" -}}
{{ include "mango.labels" .root }}
app.kubernetes.io/component: execution-worker
mango/worker-pool: {{ .pool.name }}
mango/sandbox-provider: {{ .pool.provider }}
{{- end }}

{{/* Does the pool call a real model? Usage: include "mango.worker.realModel" $p ("true" or "") */}}
{{- define "mango.worker.realModel" -}}
{{- if ne .model.provider "fake" }}true{{ end }}
{{- end }}

{{/*
ConfigMap data of one pool: every non-secret variable.
Usage: include "mango.worker.config" (dict "root" $ "pool" $p)
*/}}
{{- define "mango.worker.config" -}}
{{- $root := .root }}
{{- $p := .pool }}
MANGO_SANDBOX: {{ $p.provider | quote }}
MANGO_CONTROLPLANE_ADDR: {{ include "mango.controlPlaneAddr" $root | quote }}
{{ include "mango.temporalEnv" $root }}
MANGO_METRICS_ADDR: "0.0.0.0:9090"
MANGO_SHUTDOWN_GRACE: {{ printf "%vs" $p.shutdownGraceSeconds | quote }}
MANGO_LOG_LEVEL: {{ $p.log.level | quote }}
MANGO_LOG_FORMAT: {{ $p.log.format | quote }}
MANGO_MODEL: {{ $p.model.provider | quote }}
MANGO_MCP_ALLOW_PRIVATE: {{ $root.Values.mcp.allowPrivateNetworks | quote }}
{{- with include "mango.tracingEnv" (dict "root" $root "pool" $p) }}
{{ . }}
{{- end }}
{{- with $p.selfHostedToolTimeout }}
MANGO_SELF_HOSTED_TOOL_TIMEOUT: {{ . | quote }}
{{- end }}
{{- with $p.outputs }}
MANGO_OUTPUTS_MAX_FILES: {{ .maxFiles | int64 | quote }}
MANGO_OUTPUTS_MAX_BYTES: {{ .maxBytes | int64 | quote }}
{{- end }}
{{- if include "mango.worker.realModel" $p }}
MANGO_MODEL_AUTH: {{ $p.model.auth | quote }}
{{- with $p.model.baseURL }}
MANGO_MODEL_BASE_URL: {{ . | quote }}
{{- end }}
{{- with $p.model.id }}
MANGO_MODEL_ID: {{ . | quote }}
{{- end }}
{{- with $p.model.graderModel }}
MANGO_OUTCOME_GRADER_MODEL: {{ . | quote }}
{{- end }}
{{- end }}
{{- if $p.allowUnsafeLocalSandbox }}
MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX: "1"
{{- end }}
{{- with $p.locality }}
MANGO_SANDBOX_LOCALITY: {{ . | quote }}
{{- end }}
{{- if eq $p.provider "local" }}
{{- with (default dict $p.local).sandboxRoot }}
MANGO_LOCAL_SANDBOX_ROOT: {{ . | quote }}
{{- end }}
{{- end }}
{{- if eq $p.provider "docker" }}
{{- $docker := default dict $p.docker }}
{{- with $docker.host }}
DOCKER_HOST: {{ . | quote }}
{{- end }}
{{- if $docker.configSecret }}
DOCKER_CONFIG: "/etc/mango/docker"
{{- end }}
{{- with $docker.warmPool }}
MANGO_DOCKER_WARM_POOL: {{ . | quote }}
{{- end }}
{{- end }}
{{- if eq $p.provider "k8s" }}
{{- $k8s := $p.k8s }}
MANGO_K8S_NAMESPACE: {{ default $root.Release.Namespace $k8s.namespace | quote }}
MANGO_K8S_ROUTER_URL: {{ $k8s.routerURL | quote }}
{{- with $k8s.image }}
MANGO_K8S_IMAGE: {{ . | quote }}
{{- end }}
{{- with $k8s.warmPool }}
MANGO_K8S_WARM_POOL: {{ . | quote }}
{{- end }}
{{- end }}
{{- with $root.Values.controlPlane.tls }}
{{- if .enabled }}
MANGO_CONTROLPLANE_TLS_CA_FILE: {{ printf "%s/ca.crt" (include "mango.tls.controlPlaneDir" $root) | quote }}
{{- if .mutual }}
MANGO_CONTROLPLANE_TLS_CERT_FILE: {{ printf "%s/tls.crt" (include "mango.tls.controlPlaneDir" $root) | quote }}
MANGO_CONTROLPLANE_TLS_KEY_FILE: {{ printf "%s/tls.key" (include "mango.tls.controlPlaneDir" $root) | quote }}
{{- end }}
{{- with .serverName }}
MANGO_CONTROLPLANE_TLS_SERVER_NAME: {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Secret references of one pool's container, as YAML, for the checksum.
Usage: include "mango.worker.secrets" (dict "root" $ "pool" $p)
*/}}
{{- define "mango.worker.secrets" -}}
workerToken: {{ include "mango.workerTokenSecret" .root | fromYaml | toJson }}
{{- if include "mango.worker.realModel" .pool }}
model: {{ .pool.modelSecret | toJson }}
{{- end }}
{{- if eq .pool.provider "k8s" }}
routerToken: {{ (default dict .pool.k8s.routerToken) | toJson }}
{{- end }}
{{- end }}
