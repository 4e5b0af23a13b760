{{/* Labels every object carries. helm.sh/chart and managed-by only in a Helm release. */}}
{{- define "gpuq.labels" -}}
app.kubernetes.io/part-of: gpuq
{{- if not .Values.plainManifests }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}
{{- end -}}

{{/* The release's names (issue 27: a second release, a canary in another namespace, shares no name
with the first). gpuq.fullname: fullnameOverride, else the release name when it contains the chart name
(nameOverride), else "<release>-<name>"; release "gpuq" gives "gpuq", so its objects keep the names
gpuq-scheduler, gpuq-webhook, ... Every object name is gpuq.fullname plus a suffix (gpuq.component). */}}
{{- define "gpuq.name" -}}
{{- default .Chart.Name .Values.nameOverride -}}
{{- end -}}

{{- define "gpuq.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride -}}
{{- else -}}
{{- $name := include "gpuq.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "<fullname>-<suffix>", refused (not truncated: two truncated names could become one) when longer
than 63 characters, the limit of a Service name and of a label value. Called with (list $ "suffix"). */}}
{{- define "gpuq.component" -}}
{{- $root := index . 0 -}}
{{- $name := printf "%s-%s" (include "gpuq.fullname" $root) (index . 1) -}}
{{- if gt (len $name) 63 -}}
{{- fail (printf "the name %q has %d characters, at most 63: choose a shorter release name or set fullnameOverride" $name (len $name)) -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{/* The schedulerName pods select gpuq with: scheduler.name, or "<fullname>-scheduler" (gpuq-scheduler
for release gpuq), so a canary release schedules only the pods that name it. */}}
{{- define "gpuq.schedulerName" -}}
{{- .Values.scheduler.name | default (include "gpuq.component" (list . "scheduler")) -}}
{{- end -}}

{{- define "gpuq.leaseName" -}}
{{- .Values.scheduler.leaderElection.leaseName | default (include "gpuq.component" (list . "scheduler")) -}}
{{- end -}}

{{- define "gpuq.tlsSecretName" -}}
{{- .Values.certs.secretName | default (include "gpuq.component" (list . "webhook-tls")) -}}
{{- end -}}

{{- define "gpuq.caSecretName" -}}
{{- .Values.certs.caSecretName | default (include "gpuq.component" (list . "webhook-ca")) -}}
{{- end -}}

{{- define "gpuq.configMapName" -}}
{{- include "gpuq.component" (list . "scheduler-config") -}}
{{- end -}}

{{/* repository:tag, or repository@digest when image.digest is set (the tag is then ignored). */}}
{{- define "gpuq.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* A component's pod template metadata: podLabels and podAnnotations under the chart's own (which win:
the selector label and the configuration checksum cannot be overridden). Called with
(list $values $labels $annotations). */}}
{{- define "gpuq.podMetadata" -}}
{{- $values := index . 0 -}}
{{- $labels := merge (dict) (index . 1) ($values.podLabels | default dict) -}}
{{- $annotations := merge (dict) (index . 2) ($values.podAnnotations | default dict) -}}
labels:
  {{- toYaml $labels | nindent 2 }}
{{- with $annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A component's pod placement and security: securityContext, affinity (empty: when $spread, a
preferred podAntiAffinity spreading the replicas over nodes), nodeSelector, tolerations and
topologySpreadConstraints (one without labelSelector selects this component's pods). Called with
(list $values $selector $spread). */}}
{{- define "gpuq.podPlacement" -}}
{{- $values := index . 0 -}}
{{- $selector := index . 1 -}}
{{- with $values.securityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if $values.affinity }}
affinity: {{ toJson $values.affinity }}
{{- else if index . 2 }}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- toYaml $selector | nindent 12 }}
{{- end }}
{{- with $values.nodeSelector }}
nodeSelector: {{ toJson . }}
{{- end }}
{{- with $values.tolerations }}
tolerations: {{ toJson . }}
{{- end }}
{{- with $values.topologySpreadConstraints }}
topologySpreadConstraints:
{{- range . }}
{{- if hasKey . "labelSelector" }}
- {{ toJson . }}
{{- else }}
- {{ toJson (merge (dict "labelSelector" (dict "matchLabels" $selector)) .) }}
{{- end }}
{{- end }}
{{- end }}
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
(has(object.spec.schedulerName) && object.spec.schedulerName == {{ include "gpuq.schedulerName" . | quote }})
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
