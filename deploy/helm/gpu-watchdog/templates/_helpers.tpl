{{/*
Names are fixed, not derived from the release name: the admission policy names the two service accounts, the
agents and the controller find the kill switch, the eviction budget and the policy by name, and two releases in one
cluster would share (and fight over) the same GPUs anyway.
*/}}

{{/* Labels every object carries; app.kubernetes.io/name alone is the selector (selectors are immutable). */}}
{{- define "gpu-watchdog.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/part-of: gpu-watchdog
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{- end -}}

{{/* An image reference: repository:tag, or repository@digest when a digest is given (the digest wins). */}}
{{- define "gpu-watchdog.image" -}}
{{- $tag := .root.Values.image.tag | default .root.Chart.AppVersion -}}
{{- if .digest -}}
{{ .repository }}@{{ .digest }}
{{- else -}}
{{ .repository }}:{{ $tag }}
{{- end -}}
{{- end -}}

{{- define "gpu-watchdog.agentImage" -}}
{{ include "gpu-watchdog.image" (dict "root" . "repository" .Values.image.repository "digest" .Values.image.digest) }}
{{- end -}}

{{/* The Dockerfile's `controller` target, pushed as <repository>-controller (README, "Build and push the images"). */}}
{{- define "gpu-watchdog.controllerImage" -}}
{{- $repository := .Values.image.controllerRepository | default (printf "%s-controller" .Values.image.repository) -}}
{{ include "gpu-watchdog.image" (dict "root" . "repository" $repository "digest" .Values.image.controllerDigest) }}
{{- end -}}

{{- define "gpu-watchdog.pullSecrets" -}}
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The policy file both the agents and the controller mount: the inline policy with `mode` set from values, and
both of the chart's namespaces among the protected ones whatever the inline list says (config adds protections,
never removes them). */}}
{{- define "gpu-watchdog.policy" -}}
{{- $policy := deepCopy .Values.policy.inline -}}
{{- $action := get $policy "action" | default dict -}}
{{- $_ := set $action "mode" .Values.mode -}}
{{- $protected := get $action "protected_namespaces" | default list -}}
{{- range (list .Values.namespaces.agent .Values.namespaces.controller) -}}
{{- if not (has . $protected) -}}
{{- $protected = append $protected . -}}
{{- end -}}
{{- end -}}
{{- $_ := set $action "protected_namespaces" $protected -}}
{{- $_ := set $policy "action" $action -}}
{{ toYaml $policy }}
{{- end -}}

{{/* The ConfigMap holding policy.yaml: the chart's, or the one the user names (it must exist in both namespaces). */}}
{{- define "gpu-watchdog.policyConfigMap" -}}
{{ .Values.policy.existingConfigMap | default "gpu-watchdog-policy" }}
{{- end -}}

{{- define "gpu-watchdog.webhookSecret" -}}
{{ .Values.controller.webhookToken.secretName }}
{{- end -}}

{{/* Where the what-if token is mounted, in the agents' and the controller's pods alike: its own directory, not under
the webhook token's (a Secret volume is read-only, so nothing can be mounted inside it). `gpu-watchdog whatif`'s
--token-file defaults to <this>/token. */}}
{{- define "gpu-watchdog.whatifTokenDir" -}}
/var/run/secrets/gpu-watchdog-whatif
{{- end -}}

{{/* The agent's settings.yaml (docs/configuration.md): the chart's part, then agent.settings merged over it. */}}
{{- define "gpu-watchdog.agentSettings" -}}
{{- $base := dict "namespace" .Values.namespaces.agent "attribution" (dict "proc_root" "/host/proc") -}}
{{- $_ := set $base "publishing" (dict "port" (int .Values.agent.metricsPort)) -}}
{{- if .Values.whatif.enabled -}}
{{- $_ := set $base "flight_recorder" (dict "enabled" true "directory" "/var/lib/gpu-watchdog/flight") -}}
{{- $_ := set $base "whatif" (dict "token_file" (printf "%s/token" (include "gpu-watchdog.whatifTokenDir" .))
      "port" (int .Values.whatif.port)) -}}
{{- end -}}
{{ toYaml (mergeOverwrite $base (deepCopy .Values.agent.settings)) }}
{{- end -}}

{{/* The controller's settings.yaml: `namespace` is the agents' (kill switch, eviction budget; protected),
controller.lease_namespace the controller's own (its Lease and handled-firings record; protected too). */}}
{{- define "gpu-watchdog.controllerSettings" -}}
{{- $controller := dict "listen_port" (int .Values.controller.port) -}}
{{- $_ := set $controller "token_file" "/var/run/secrets/gpu-watchdog/webhook-token" -}}
{{- $_ := set $controller "lease_namespace" .Values.namespaces.controller -}}
{{- $_ := set $controller "lease_name" "gpu-watchdog-controller" -}}
{{- $_ := set $controller "handled_configmap" "gpu-watchdog-controller-handled" -}}
{{- $base := dict "namespace" .Values.namespaces.agent "policy_file" "/etc/gpu-watchdog/policy/policy.yaml" -}}
{{- $_ := set $base "audit_log" "-" -}}
{{- $_ := set $base "controller" $controller -}}
{{ toYaml (mergeOverwrite $base (deepCopy .Values.controller.settings)) }}
{{- end -}}

{{/* A ResourceQuota that only selects pods of one PriorityClass, followed by a document separator; empty when
priorityClassQuota is off or the workload sets no class. Where ResourceQuota admission limits a class's consumption
by default, it admits a pod of that class only in a namespace holding a quota that selects the class (Kubernetes
docs, "Resource Quotas", "Limit Priority Class consumption by default"). No `hard`: it covers, it caps nothing. */}}
{{- define "gpu-watchdog.priorityClassQuota" -}}
{{- if and .root.Values.priorityClassQuota.enabled .class }}
# The quota selecting PriorityClass {{ .class }}: pods of a class the cluster limits by default (GKE limits
# system-node-critical and system-cluster-critical outside kube-system) are admitted only in a namespace holding one.
# It caps nothing; priorityClassQuota.enabled: false leaves it out.
apiVersion: v1
kind: ResourceQuota
metadata:
  name: {{ .name }}
  namespace: {{ .namespace }}
  labels:
    {{- include "gpu-watchdog.labels" (dict "root" .root "name" .name) | nindent 4 }}
spec:
  scopeSelector:
    matchExpressions:
      - {scopeName: PriorityClass, operator: In, values: [{{ .class | quote }}]}
---
{{- end }}
{{- end -}}
