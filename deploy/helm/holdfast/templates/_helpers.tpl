{{/* Names. The full name is <release>-holdfast (the ConfigMap, the DaemonSet, the RBAC objects...). */}}
{{- define "holdfast.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "holdfast.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "holdfast.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "holdfast.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "holdfast.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "holdfast.selectorLabels" -}}
app.kubernetes.io/name: {{ include "holdfast.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "holdfast.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "holdfast.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/*
holdfast.image: the reference of holdfast's image, for every container that runs it (holdfast, the reporter,
spegel): repository@digest when image.digest is set (the tag then ignored), else repository:tag, the tag by
default the chart's appVersion. A digest that is not sha256: and 64 lowercase hex digits fails the render.
*/}}
{{- define "holdfast.image" -}}
{{- with .Values.image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" (toString .)) -}}
{{- fail (printf "image.digest %q: want sha256: and 64 lowercase hex digits (the image index's digest, as a release's chart sets it), or empty to use image.tag" (toString .)) -}}
{{- end -}}
{{- printf "%s@%s" $.Values.image.repository . -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/*
holdfast.paths: the node paths, as YAML (read back with fromYaml): the runtime preset, each value set in
values taking its place. "none" turns an optional path off (certsDir, registriesYaml, contentRoot).
*/}}
{{- define "holdfast.paths" -}}
{{- $presets := dict
  "k3s" (dict
    "containerdSocket" "/run/k3s/containerd/containerd.sock"
    "imagesDir" "/var/lib/rancher/k3s/agent/images"
    "certsDir" "/var/lib/rancher/k3s/agent/etc/containerd/certs.d"
    "registriesYaml" "/etc/rancher/k3s/registries.yaml"
    "contentRoot" "/var/lib/rancher/k3s/agent/containerd/io.containerd.content.v1.content")
  "rke2" (dict
    "containerdSocket" "/run/k3s/containerd/containerd.sock"
    "imagesDir" "/var/lib/rancher/rke2/agent/images"
    "certsDir" "/var/lib/rancher/rke2/agent/etc/containerd/certs.d"
    "registriesYaml" "/etc/rancher/rke2/registries.yaml"
    "contentRoot" "/var/lib/rancher/rke2/agent/containerd/io.containerd.content.v1.content")
  "containerd" (dict
    "containerdSocket" "/run/containerd/containerd.sock"
    "imagesDir" "/var/lib/holdfast/images"
    "certsDir" "/etc/containerd/certs.d"
    "registriesYaml" "none"
    "contentRoot" "/var/lib/containerd/io.containerd.content.v1.content")
-}}
{{- $preset := get $presets (toString .Values.runtime) -}}
{{- if not $preset -}}
{{- fail (printf "runtime %q: want k3s, rke2 or containerd" (toString .Values.runtime)) -}}
{{- end -}}
{{- $out := dict -}}
{{- range $key := list "containerdSocket" "imagesDir" "certsDir" "registriesYaml" "contentRoot" -}}
{{- $v := get $.Values $key | default "" | toString | default (get $preset $key) -}}
{{- if eq $v "none" -}}{{- $v = "" -}}{{- end -}}
{{- if and $v (not (isAbs $v)) -}}
{{- fail (printf "%s %q: want an absolute path on the node (or \"none\")" $key $v) -}}
{{- end -}}
{{- if $v -}}{{- $v = clean $v -}}{{- end -}}
{{- $_ := set $out $key $v -}}
{{- end -}}
{{- range $key := list "containerdSocket" "imagesDir" -}}
{{- if not (get $out $key) -}}
{{- fail (printf "%s must be set (an absolute path on the node)" $key) -}}
{{- end -}}
{{- end -}}
{{- if not (isAbs (toString .Values.dataDir)) -}}
{{- fail (printf "dataDir %q: want an absolute path on the node" (toString .Values.dataDir)) -}}
{{- end -}}
{{- $dataDir := clean (toString .Values.dataDir) -}}
{{- $system := list "/" "/bin" "/boot" "/dev" "/etc" "/home" "/lib" "/lib32" "/lib64" "/libx32" "/opt" "/proc" "/root" "/run" "/sbin" "/srv" "/sys" "/tmp" "/usr" "/var" "/var/lib" "/var/log" "/var/run" "/var/tmp" "/var/lib/kubelet" "/var/lib/containerd" "/run/containerd" "/var/lib/rancher" "/var/lib/rancher/k3s" "/var/lib/rancher/rke2" "/var/lib/rancher/k3s/agent/containerd" "/var/lib/rancher/rke2/agent/containerd" "/run/k3s" "/run/k3s/containerd" "/run/rke2" "/etc/containerd" "/etc/rancher" "/etc/kubernetes" -}}
{{- if has $dataDir $system -}}
{{- fail (printf "dataDir %q: a system or container runtime directory; holdfast locks, writes and may delete in its data dir, so give it a directory of its own (the default is /var/lib/holdfast/data)" (toString .Values.dataDir)) -}}
{{- end -}}
{{- range $p := list "/proc" "/sys" "/dev" "/var/lib/containerd" "/run/containerd" "/var/lib/kubelet" "/var/lib/rancher/k3s/agent/containerd" "/var/lib/rancher/rke2/agent/containerd" "/run/k3s/containerd" -}}
{{- if hasPrefix (printf "%s/" $p) $dataDir -}}
{{- fail (printf "dataDir %q: inside %s, which belongs to the kernel, the kubelet or containerd; give holdfast a directory of its own (the default is /var/lib/holdfast/data)" (toString $.Values.dataDir) $p) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $out "dataDir" $dataDir -}}
{{- $_ := set $out "socketDir" (dir (get $out "containerdSocket")) -}}
{{- toYaml $out -}}
{{- end -}}

{{/* The ConfigMap's mount point in the pod; holdfast reads it as one more images dir. */}}
{{- define "holdfast.clusterDir" -}}/etc/holdfast/cluster{{- end -}}
