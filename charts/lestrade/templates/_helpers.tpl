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

{{- define "lestrade.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Environment common to the operator, the API and the Jobs. */}}
{{- define "lestrade.env" -}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
{{- if .Values.modelList }}
- name: LESTRADE_MODEL_LIST
  value: /etc/lestrade/models/modelList.yaml
{{- end }}
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
- name: LESTRADE_ENABLE_BASH
  value: {{ .Values.tools.enableBash | quote }}
- name: LESTRADE_ENABLE_WRITE_TOOLS
  value: {{ .Values.tools.enableWriteTools | quote }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}
