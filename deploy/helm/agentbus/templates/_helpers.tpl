{{- define "agentbus.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "agentbus.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "agentbus.selectorLabels" -}}
app.kubernetes.io/name: {{ include "agentbus.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "agentbus.labels" -}}
{{ include "agentbus.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The configuration file: .Values.config with the Secrets' paths. */}}
{{- define "agentbus.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $nats := get $cfg "nats" | default dict -}}
{{- if not (get $nats "url") -}}
{{- fail "config.nats.url is required: every replica must share one external JetStream cluster (the embedded server is one machine's)" -}}
{{- end -}}
{{- if .Values.secrets.natsCreds.name -}}
{{- $_ := set $nats "creds" "/etc/agentbus/nats/creds/creds" -}}
{{- end -}}
{{- if .Values.secrets.natsTLS.name -}}
{{- $_ := set $nats "tls" (dict "ca" "/etc/agentbus/nats/tls/ca.crt" "cert" "/etc/agentbus/nats/tls/tls.crt" "key" "/etc/agentbus/nats/tls/tls.key") -}}
{{- end -}}
{{- $_ := set $cfg "nats" $nats -}}
{{- toYaml $cfg -}}
{{- end -}}
