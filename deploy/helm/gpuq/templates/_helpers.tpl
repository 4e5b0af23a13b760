{{/* Labels every object carries. helm.sh/chart and managed-by only in a Helm release. */}}
{{- define "gpuq.labels" -}}
app.kubernetes.io/part-of: gpuq
{{- if not .Values.plainManifests }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}
{{- end -}}

{{- define "gpuq.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Restricted Pod Security Standard: what both containers run with. */}}
{{- define "gpuq.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities: {drop: [ALL]}
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{- define "gpuq.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{/* The namespaces the webhooks never see: the configured ones plus the release namespace. */}}
{{- define "gpuq.excludedNamespaces" -}}
{{- $names := append (.Values.webhook.excludedNamespaces | default list) .Release.Namespace | uniq -}}
{{ toJson $names }}
{{- end -}}

{{/* On both pod templates: a changed configuration rolls the scheduler and the webhook together, as
both read it once, at start (design.md Semantics 10). */}}
{{- define "gpuq.configChecksum" -}}
checksum/config: {{ .Values.scheduler.config | sha256sum }}
{{- end -}}
