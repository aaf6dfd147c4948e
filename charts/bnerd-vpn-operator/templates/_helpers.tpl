{{/* Chart name. */}}
{{- define "bnerd-vpn-operator.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: the release name if it already contains the chart name, else <release>-<chart>.
     Also the name of the leader-election Lease (env IPSEC_LEASE_NAME). */}}
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
     Usage: include "bnerd-vpn-operator.imageRef" (dict "image" .Values.image "root" $) */}}
{{- define "bnerd-vpn-operator.imageRef" -}}
{{- $tag := .image.tag | default .root.Chart.AppVersion | toString -}}
{{- printf "%s:%s" (required "image repository must be set" .image.repository) $tag -}}
{{- end -}}

{{/* The values an install cannot do without, checked in this order; each message says how
     to set it. values.schema.json checks types and formats; these check presence, so an
     unset value gets a message that says what to do rather than a schema error. */}}
{{- define "bnerd-vpn-operator.validate" -}}
{{- $_ := required "openstack.routerID is required: the gateway cluster's OpenStack router ID (--set openstack.routerID=<uuid>)" .Values.openstack.routerID -}}
{{- $_ = required "openstack.transitNetworkID is required: the transit network ID (--set openstack.transitNetworkID=<uuid>)" .Values.openstack.transitNetworkID -}}
{{- $_ = required (printf "openstack.cloudsSecret is required: the name of a Secret in namespace %s with the key clouds.yaml holding the operator's OpenStack credential (kubectl -n %s create secret generic bnerd-vpn-openstack --from-file=clouds.yaml, then --set openstack.cloudsSecret=bnerd-vpn-openstack)" .Release.Namespace .Release.Namespace) .Values.openstack.cloudsSecret -}}
{{- if and .Values.openstack.caBundle .Values.openstack.caBundleConfigMap -}}
{{- fail "openstack.caBundle and openstack.caBundleConfigMap are both set: set one (OS_CACERT is a single file)" -}}
{{- end -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) -}}
{{- fail "replicaCount > 1 needs leaderElection.enabled=true: without it every replica reconciles the same links at once" -}}
{{- end -}}
{{- with .Values.podDisruptionBudget -}}
{{- if and .enabled (not (kindIs "invalid" .minAvailable)) (not (kindIs "string" .minAvailable)) (not .maxUnavailable) (gt (int $.Values.replicaCount) 1) (ge (int .minAvailable) (int $.Values.replicaCount)) -}}
{{- fail (printf "podDisruptionBudget.minAvailable (%d) must be below replicaCount (%d): otherwise no node drain can ever evict an operator pod" (int .minAvailable) (int $.Values.replicaCount)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Whether a CA bundle is mounted (then OS_CACERT is set). */}}
{{- define "bnerd-vpn-operator.caConfigMap" -}}
{{- if .Values.openstack.caBundle -}}
{{- printf "%s-ca" (include "bnerd-vpn-operator.fullname" .) -}}
{{- else if .Values.openstack.caBundleConfigMap -}}
{{- .Values.openstack.caBundleConfigMap -}}
{{- end -}}
{{- end -}}

{{- define "bnerd-vpn-operator.caKey" -}}
{{- if .Values.openstack.caBundle -}}ca.crt{{- else -}}{{ .Values.openstack.caBundleConfigMapKey | default "ca.crt" }}{{- end -}}
{{- end -}}

{{- define "bnerd-vpn-operator.metricsAddr" -}}
{{- printf "%s:%d" .Values.metrics.bindAddress (int .Values.metrics.port) -}}
{{- end -}}

{{/*
The Deployment's rollout: updateStrategy.type, unless old and new pods could both write at
once. The live Deployment (lookup; empty under `helm template`) tells how the running pods
were started: pods without IPSEC_LEADER_ELECT=true (chart 0.2.0, or election turned off)
never wait for a Lease, so the new pods may only start once they are gone.
*/}}
{{- define "bnerd-vpn-operator.rollout" -}}
{{- $type := .Values.updateStrategy.type -}}
{{- if not .Values.leaderElection.enabled -}}
{{- $type = "Recreate" -}}
{{- end -}}
{{- $live := lookup "apps/v1" "Deployment" .Release.Namespace (include "bnerd-vpn-operator.fullname" .) -}}
{{- if $live -}}
{{- $elects := false -}}
{{- range ((($live.spec).template).spec).containers -}}
{{- range .env -}}
{{- if and (eq .name "IPSEC_LEADER_ELECT") (eq (toString .value) "true") -}}
{{- $elects = true -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not $elects -}}
{{- $type = "Recreate" -}}
{{- end -}}
{{- end -}}
{{- $type -}}
{{- end -}}
