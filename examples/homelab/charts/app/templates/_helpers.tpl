{{/* The ports: .Values.ports, or one "http" port from .Values.port. */}}
{{- define "app.ports" -}}
{{- if .Values.ports -}}
{{ toJson .Values.ports }}
{{- else -}}
{{ toJson (list (dict "name" "http" "port" .Values.port "nodePort" .Values.nodePort)) }}
{{- end -}}
{{- end -}}
