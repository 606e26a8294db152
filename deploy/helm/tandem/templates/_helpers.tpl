{{/* The chart's name, and the prefix of every object's name. */}}
{{- define "tandem.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Room is left for the longest role suffix, "-frontend", within 63. */}}
{{- define "tandem.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 54 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 54 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 54 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A role's object name: (dict "root" $ "role" "frontend"). */}}
{{- define "tandem.roleName" -}}
{{- printf "%s-%s" (include "tandem.fullname" .root) .role -}}
{{- end -}}

{{- define "tandem.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tandem.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .role }}
{{- end -}}

{{/* tandem-job is the Prometheus job name (ServiceMonitor jobLabel), tandem-ROLE as
deploy/monitoring/alerts.yaml expects (job=~"tandem.*"). */}}
{{- define "tandem.labels" -}}
{{ include "tandem.selectorLabels" . }}
app.kubernetes.io/part-of: tandem
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
tandem-job: tandem-{{ .role }}
{{- end -}}

{{- define "tandem.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}

{{/* The Consul agent's address: the node's agent through the downward API, or the one given. */}}
{{- define "tandem.consulAddr" -}}
{{- if .Values.consul.hostAgent -}}
$(HOST_IP):{{ .Values.consul.hostAgentPort }}
{{- else if .Values.consul.devAgent.enabled -}}
{{ include "tandem.roleName" (dict "root" . "role" "consul") }}:8500
{{- else -}}
{{ .Values.consul.address }}
{{- end -}}
{{- end -}}

{{- define "tandem.tokenPath" -}}/var/run/secrets/tandem/consul/token{{- end -}}
{{- define "tandem.consulCAPath" -}}/var/run/secrets/tandem/consul-ca/ca.crt{{- end -}}

{{/* terminationGracePeriodSeconds: the drain, the frontend's preStop sleep, and 10 s to exit. */}}
{{- define "tandem.grace" -}}
{{- add .Values.drainTimeoutSeconds .Values.frontend.preStopSleepSeconds 10 -}}
{{- end -}}

{{/* The flags every service takes: where it listens and registers, Consul, logs, traces.
(dict "root" $ "role" "router" "port" 9000) */}}
{{- define "tandem.serviceArgs" -}}
- --listen=0.0.0.0:{{ .port }}
- --advertise=$(POD_IP):{{ .port }}
- --consul={{ include "tandem.consulAddr" .root }}
- --check-interval={{ .root.Values.consul.checkInterval }}
{{- if .root.Values.consul.acl.secretName }}
- --consul-token-file={{ include "tandem.tokenPath" . }}
{{- end }}
- --drain-timeout={{ .root.Values.drainTimeoutSeconds }}s
- --log-level={{ .root.Values.logLevel }}
{{- with .root.Values.otlpEndpoint }}
- --otlp-endpoint={{ . }}
{{- end }}
{{- end -}}

{{/* The environment every tandem container gets: its pod's name and address and its
node's (for the args above), and Consul's TLS settings. */}}
{{- define "tandem.env" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: HOST_IP
  valueFrom:
    fieldRef:
      fieldPath: status.hostIP
{{- if .Values.consul.tls.enabled }}
- name: CONSUL_HTTP_SSL
  value: "true"
{{- if .Values.consul.tls.caSecret }}
- name: CONSUL_CACERT
  value: {{ include "tandem.consulCAPath" . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The volumes every tandem pod mounts: a writable /tmp, the role's Consul token, Consul's CA.
(dict "root" $ "role" "router") */}}
{{- define "tandem.volumes" -}}
- name: tmp
  emptyDir: {}
{{- if .root.Values.consul.acl.secretName }}
- name: consul-token
  secret:
    secretName: {{ .root.Values.consul.acl.secretName }}
    defaultMode: 0400
    items:
      - key: {{ index .root.Values.consul.acl.keys .role }}
        path: token
{{- end }}
{{- if and .root.Values.consul.tls.enabled .root.Values.consul.tls.caSecret }}
- name: consul-ca
  secret:
    secretName: {{ .root.Values.consul.tls.caSecret }}
    items:
      - key: {{ .root.Values.consul.tls.caSecretKey }}
        path: ca.crt
{{- end }}
{{- end -}}

{{- define "tandem.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if .Values.consul.acl.secretName }}
- name: consul-token
  mountPath: /var/run/secrets/tandem/consul
  readOnly: true
{{- end }}
{{- if and .Values.consul.tls.enabled .Values.consul.tls.caSecret }}
- name: consul-ca
  mountPath: /var/run/secrets/tandem/consul-ca
  readOnly: true
{{- end }}
{{- end -}}

{{/* The pod-level settings every role shares: (dict "root" $ "role" "router"). */}}
{{- define "tandem.podSpec" -}}
{{- $r := index .root.Values .role -}}
automountServiceAccountToken: false
enableServiceLinks: false
terminationGracePeriodSeconds: {{ include "tandem.grace" .root }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $r.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $r.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $r.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
