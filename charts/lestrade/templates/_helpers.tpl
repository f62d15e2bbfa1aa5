{{/* Names and labels shared by every template. */}}
{{- define "lestrade.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "lestrade.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "lestrade.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "lestrade.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "lestrade.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The read-only identity the tools act as (the operator mints its tokens). */}}
{{- define "lestrade.toolsServiceAccountName" -}}
{{- printf "%s-tools" (include "lestrade.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "lestrade.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Environment common to the operator, the API and the Jobs. */}}
{{- define "lestrade.env" -}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
{{- if include "lestrade.modelsSecret" . }}
- name: LESTRADE_MODEL_LIST
  value: /etc/lestrade/models/modelList.yaml
{{- end }}
# The root filesystem is read-only: home and caches live in the /tmp emptyDir.
- name: HOME
  value: /tmp
- name: PYTHONDONTWRITEBYTECODE
  value: "1"
{{- if .Values.defaultModel }}
- name: LESTRADE_DEFAULT_MODEL
  value: {{ .Values.defaultModel | quote }}
{{- end }}
{{- if .Values.clusterName }}
- name: LESTRADE_CLUSTER_NAME
  value: {{ .Values.clusterName | quote }}
{{- end }}
{{- if .Values.tools.prometheusUrl }}
- name: LESTRADE_PROMETHEUS_URL
  value: {{ .Values.tools.prometheusUrl | quote }}
{{- end }}
{{- if .Values.tools.alertmanagerUrl }}
- name: LESTRADE_ALERTMANAGER_URL
  value: {{ .Values.tools.alertmanagerUrl | quote }}
{{- end }}
{{- if ne .Values.tools.prometheusNamespaceLabel "namespace" }}
- name: LESTRADE_PROMETHEUS_NAMESPACE_LABEL
  value: {{ .Values.tools.prometheusNamespaceLabel | quote }}
{{- end }}
- name: LESTRADE_ENABLE_BASH
  value: {{ .Values.tools.enableBash | quote }}
# Where AlertRoutes with alertNamespace: Any are honoured (Own routes are, in every namespace):
# the API matches by it, the operator explains a route it ignores in the route's Ready condition.
- name: LESTRADE_ALERT_ROUTES_ALL_NAMESPACES
  value: {{ .Values.api.alertRoutesAllNamespaces | quote }}
{{- with .Values.api.alertRoutesAnyNamespaces }}
- name: LESTRADE_ALERT_ROUTES_ANY_NAMESPACES
  value: {{ join "," . | quote }}
{{- end }}
{{- if .Values.rbac.create }}
- name: LESTRADE_TOOLS_SERVICE_ACCOUNT
  value: {{ printf "%s/%s" .Release.Namespace (include "lestrade.toolsServiceAccountName" .) | quote }}
{{- if .Values.tenancy.enabled }}
- name: LESTRADE_SCOPES_NAMESPACE
  value: {{ printf "%s-scopes" (include "lestrade.fullname" .) | quote }}
- name: LESTRADE_TOOLS_READ_ROLE
  value: {{ printf "%s-tools-read" (include "lestrade.fullname" .) | quote }}
- name: LESTRADE_SCOPE_POLICY
  value: {{ printf "%s/%s-scope-policy" .Release.Namespace (include "lestrade.fullname" .) | quote }}
{{- end }}
{{- end }}
- name: LESTRADE_ENABLE_WRITE_TOOLS
  value: {{ .Values.tools.enableWriteTools | quote }}
- name: LESTRADE_RUNBOOK_NAMESPACES
  value: {{ default (list .Release.Namespace) .Values.tools.runbookNamespaces | join "," | quote }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}


{{/* The Secret holding the model list: the chart's own, the user's, or none (demo model). */}}
{{- define "lestrade.modelsSecret" -}}
{{- if and .Values.existingSecret .Values.modelList -}}
{{- fail "set either modelList or existingSecret (a Secret of your own holding the model list), not both" -}}
{{- else if .Values.existingSecret -}}
{{- .Values.existingSecret -}}
{{- else if .Values.modelList -}}
{{- printf "%s-models" (include "lestrade.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "lestrade.modelsVolume" -}}
- name: models
  secret:
    secretName: {{ include "lestrade.modelsSecret" . }}
    items:
      - key: {{ if .Values.existingSecret }}{{ .Values.existingSecretKey }}{{ else }}modelList.yaml{{ end }}
        path: modelList.yaml
{{- end -}}

{{/* Every container: hardened, with a private writable /tmp. */}}
{{- define "lestrade.containerSecurity" -}}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
{{- end -}}

{{- define "lestrade.scratchVolume" -}}
- name: {{ .name }}
  emptyDir:
    sizeLimit: {{ .root.Values.scratch.sizeLimit }}
{{- end -}}

{{/* The egress rules of the NetworkPolicy (the operator, the API and the Jobs need the same). */}}
{{- define "lestrade.egress" -}}
{{- range $name, $rule := .Values.networkPolicy.egress }}
{{- if $rule }}
- to:
    {{- toYaml $rule.to | nindent 4 }}
  ports:
    {{- toYaml $rule.ports | nindent 4 }}
{{- end }}
{{- end }}
{{- with .Values.networkPolicy.extraEgress }}
{{ toYaml . }}
{{- end }}
{{- end -}}
