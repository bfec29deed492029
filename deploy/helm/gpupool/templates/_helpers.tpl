{{/* Names. Everything is prefixed with the release's full name. */}}
{{- define "gpupool.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpupool.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Selector labels of one component (server, postgresql, agent). */}}
{{- define "gpupool.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gpupool.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "gpupool.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "gpupool.fullname" .) -}}
{{- end -}}

{{/* The URL the agent and Z2JH's hub use to reach the server inside the cluster. */}}
{{- define "gpupool.internalUrl" -}}
{{- printf "http://%s.%s.svc:%d" (include "gpupool.fullname" .) .Release.Namespace (int .Values.service.port) -}}
{{- end -}}

{{/* A secret value kept across upgrades: the existing Secret's key when there is one
     (helm upgrade, `lookup`), else a new random one. `helm template` has no cluster, so it
     always generates; pass the value explicitly where that matters. */}}
{{- define "gpupool.keptSecret" -}}
{{- $existing := lookup "v1" "Secret" .root.Release.Namespace .name -}}
{{- if and $existing $existing.data (hasKey $existing.data .key) -}}
{{- index $existing.data .key | b64dec -}}
{{- else -}}
{{- randAlphaNum 24 -}}
{{- end -}}
{{- end -}}

{{/* The Secret and key holding GPUPOOL_DATABASE_URL. */}}
{{- define "gpupool.databaseSecretName" -}}
{{- if and (not .Values.postgresql.enabled) .Values.externalDatabase.existingSecret -}}
{{- .Values.externalDatabase.existingSecret -}}
{{- else -}}
{{- printf "%s-database" (include "gpupool.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "gpupool.databaseSecretKey" -}}
{{- if and (not .Values.postgresql.enabled) .Values.externalDatabase.existingSecret -}}
{{- .Values.externalDatabase.existingSecretKey -}}
{{- else -}}
url
{{- end -}}
{{- end -}}

{{- define "gpupool.metricsSecretName" -}}
{{- .Values.metrics.existingSecret | default (printf "%s-metrics" (include "gpupool.fullname" .)) -}}
{{- end -}}

{{- define "gpupool.adminSecretName" -}}
{{- .Values.admin.existingSecret | default (printf "%s-admin" (include "gpupool.fullname" .)) -}}
{{- end -}}

