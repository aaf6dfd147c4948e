{{/* Chart name. */}}
{{- define "bnerd-vpn-operator.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: the release name if it already contains the chart name, else <release>-<chart>. */}}
{{- define "bnerd-vpn-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "bnerd-vpn-operator.serviceAccountName" -}}
{{- default (include "bnerd-vpn-operator.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "bnerd-vpn-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "bnerd-vpn-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "bnerd-vpn-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "bnerd-vpn-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* "repository:tag" with an empty tag falling back to .Chart.AppVersion.
     Usage: include "bnerd-vpn-operator.imageRef" (dict "image" .Values.images.gateway "root" $) */}}
{{- define "bnerd-vpn-operator.imageRef" -}}
{{- $tag := .image.tag | default .root.Chart.AppVersion | toString -}}
{{- printf "%s:%s" (required "image repository must be set" .image.repository) $tag -}}
{{- end -}}
