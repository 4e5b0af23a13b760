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

{{/* The namespaces the webhooks never see: kube-system and the release namespace whatever the values
say (null, {} or a list without them), plus the configured ones. */}}
{{- define "gpuq.excludedNamespaces" -}}
{{- $configured := .Values.webhook.excludedNamespaces | default list -}}
{{- $names := concat (list "kube-system" .Release.Namespace) $configured | uniq -}}
{{ toJson $names }}
{{- end -}}

{{/* CEL: the Pods gpuq governs (design.md, "Webhook scope"). A Pod of gpuq's scheduler, or one that
carries an annotation gpuq reads, or (only when the webhook sets schedulerName) one that requests a
GPU resource: nvidia.com/gpu, nvidia.com/gpu.shared, nvidia.com/mig-*, <vendor>/gpu. */}}
{{- define "gpuq.governedPod" -}}
(has(object.spec.schedulerName) && object.spec.schedulerName == {{ .Values.scheduler.name | quote }})
|| (has(object.metadata.annotations) && object.metadata.annotations.exists(k,
    k in ["volcano.sh/card.name", "scheduling.k8s.io/group-name", "scheduling.volcano.sh/queue-name",
          "volcano.sh/crossquota-scoring-strategy"]
    || k.startsWith("tensor-fusion.ai/") || k.startsWith("volcano.sh/resource-strategy-")))
{{- if .Values.webhook.setSchedulerName }}
|| ((has(object.spec.initContainers) ? object.spec.initContainers : []) + object.spec.containers).exists(c,
    has(c.resources) && (
      (has(c.resources.requests) && c.resources.requests.exists(r, r == "nvidia.com/gpu.shared"
        || r.startsWith("nvidia.com/mig-") || r.endsWith("/gpu")))
      || (has(c.resources.limits) && c.resources.limits.exists(r, r == "nvidia.com/gpu.shared"
        || r.startsWith("nvidia.com/mig-") || r.endsWith("/gpu")))))
{{- end }}
{{- end -}}

{{/* On both pod templates: a changed configuration rolls the scheduler and the webhook together, as
both read it once, at start (design.md Semantics 10). */}}
{{- define "gpuq.configChecksum" -}}
checksum/config: {{ .Values.scheduler.config | sha256sum }}
{{- end -}}
