{{/* Names and labels. */}}
{{- define "kandle.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kandle.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{ include "kandle.commonLabels" . }}
{{- end -}}

{{/* The labels besides the selector labels (name, instance). */}}
{{- define "kandle.commonLabels" -}}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of the processing group (the StatefulSet's pods). */}}
{{- define "kandle.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: processor
{{- end -}}

{{/* Selector labels of kandle serve. */}}
{{- define "kandle.serveSelectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: serve
{{- end -}}

{{- define "kandle.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kandle.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kandle.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The topology file as a map (it is a YAML string in the values). */}}
{{- define "kandle.topology" -}}
{{- if not .Values.topology -}}
{{- fail "values: topology is required (the topology YAML kandle runs)" -}}
{{- end -}}
{{- .Values.topology | fromYaml | toYaml -}}
{{- end -}}

{{/*
The consumer groups of the topology, as kandle names them: one per processor
reading Kafka (<group>.<processor>, reading the source topic or the upstream
processor's output topic) and one per sink (<group>.sink.<sink>, reading each
topic it takes). <group> is the topology's group, default kandle-<name>; a
processor's output topic defaults to <name>.<processor>. A processor reading
a Kinesis stream has no group (shard leases instead): it is listed with its
stream. Rendered as YAML {groups: [...]} for fromYaml.
*/}}
{{- define "kandle.consumerGroups" -}}
{{- $t := include "kandle.topology" . | fromYaml -}}
{{- $prefix := default (printf "kandle-%s" $t.name) $t.group -}}
{{- $sources := default dict $t.sources -}}
{{- $procs := default dict $t.processors -}}
{{- $sinks := default dict $t.sinks -}}
groups:
{{- range $name := keys $procs | sortAlpha }}
{{- $p := get $procs $name }}
{{- if hasKey $sources $p.from }}
{{- $s := get $sources $p.from }}
{{- if eq (default "kafka" $s.kind) "kinesis" }}
  - {name: {{ $name | quote }}, kind: processor, stream: {{ $s.kinesis.stream | quote }}, region: {{ default "us-east-1" $s.kinesis.region | quote }}}
{{- else }}
  - {name: {{ $name | quote }}, kind: processor, group: {{ printf "%s.%s" $prefix $name | quote }}, topic: {{ $s.topic | quote }}}
{{- end }}
{{- else }}
{{- $up := get $procs $p.from }}
{{- $out := dig "output" "topic" "" $up }}
  - {name: {{ $name | quote }}, kind: processor, group: {{ printf "%s.%s" $prefix $name | quote }}, topic: {{ default (printf "%s.%s" $t.name $p.from) $out | quote }}}
{{- end }}
{{- end }}
{{- range $name := keys $sinks | sortAlpha }}
{{- $sk := get $sinks $name }}
{{- range $from := $sk.from }}
{{- if hasKey $procs $from }}
{{- $out := dig "output" "topic" "" (get $procs $from) }}
  - {name: {{ $name | quote }}, kind: sink, group: {{ printf "%s.sink.%s" $prefix $name | quote }}, topic: {{ default (printf "%s.%s" $t.name $from) $out | quote }}}
{{- else if hasKey $sources $from }}
{{- $s := get $sources $from }}
{{- if ne (default "kafka" $s.kind) "kinesis" }}
  - {name: {{ $name | quote }}, kind: sink, group: {{ printf "%s.sink.%s" $prefix $name | quote }}, topic: {{ $s.topic | quote }}}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
The most partitions any consumer group of the topology reads: more pods than
this find no partition to own in any stage.
*/}}
{{- define "kandle.maxPartitions" -}}
{{- $t := include "kandle.topology" . | fromYaml -}}
{{- $max := 1 -}}
{{- range $_, $s := default dict $t.sources -}}
{{- $n := int (default 3 $s.partitions) -}}
{{- if and (ne (default "kafka" $s.kind) "kinesis") (gt $n $max) }}{{ $max = $n }}{{ end -}}
{{- end -}}
{{- range $_, $p := default dict $t.processors -}}
{{- $n := int (dig "output" "partitions" 3 $p) -}}
{{- if gt $n $max }}{{ $max = $n }}{{ end -}}
{{- end -}}
{{- $max -}}
{{- end -}}

{{/* Environment shared by every kandle container: extra env, secrets by reference. */}}
{{- define "kandle.env" -}}
{{- range .Values.secretEnv }}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .secretName }}
      key: {{ .key }}
{{- end }}
{{- with .Values.env }}
{{ toYaml . }}
{{- end }}
{{- end -}}
