{{/*
Peers (peers.enabled, runtime containerd): spegel beside holdfast in each pod, serving the node's containerd
content to the other nodes and, as the node's registry mirror, fetching from them.
*/}}

{{/* holdfast.peers.check: fails the template on values peers cannot run with. */}}
{{- define "holdfast.peers.check" -}}
{{- $paths := include "holdfast.paths" . | fromYaml -}}
{{- if .Values.peers.enabled -}}
{{- if ne (toString .Values.runtime) "containerd" -}}
{{- fail (printf "peers.enabled: runtime %s embeds spegel already: turn on K3s's own (embedded-registry: true in its config, the registries to share as mirrors in registries.yaml); peers.pullRequired alone can be set with %s" (toString .Values.runtime) (toString .Values.runtime)) -}}
{{- end -}}
{{- if or (not $paths.certsDir) $paths.registriesYaml -}}
{{- fail "peers.enabled: holdfast writes the mirror hosts.toml files into certsDir, the dir the node's containerd reads them from: certsDir must be set and registriesYaml \"none\"" -}}
{{- end -}}
{{- if not .Values.peers.registries -}}
{{- fail "peers.enabled: peers.registries is empty; name the registries the nodes share images of" -}}
{{- end -}}
{{- $ports := list (int .Values.peers.registryPort) (int .Values.peers.routerPort) (int .Values.peers.metricsPort) 9747 -}}
{{- if ne (len $ports) (len (uniq $ports)) -}}
{{- fail (printf "peers: registryPort, routerPort and metricsPort must differ from each other and from holdfast's 9747: %v" $ports) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* holdfast.pullRequired: "true" when the agent pulls its node's required images: peers.pullRequired, by default peers.enabled. */}}
{{- define "holdfast.pullRequired" -}}
{{- if kindIs "invalid" .Values.peers.pullRequired -}}
{{- .Values.peers.enabled | toString -}}
{{- else -}}
{{- .Values.peers.pullRequired | toString -}}
{{- end -}}
{{- end -}}

{{/* holdfast.peers.container: the spegel container of the pod. */}}
{{- define "holdfast.peers.container" -}}
{{- $paths := include "holdfast.paths" . | fromYaml -}}
- name: spegel
  image: {{ include "holdfast.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: ["/spegel"]
  args:
    - registry
    - --log-level={{ upper .Values.logLevel }}
    - --containerd-sock={{ $paths.containerdSocket }}
    - --containerd-namespace=k8s.io
    {{- if $paths.contentRoot }}
    # Blobs are read from the store's directory (else through containerd's content API, below).
    - --containerd-content-path={{ $paths.contentRoot }}
    {{- end }}
    - --registry-addr=:{{ .Values.peers.registryPort }}
    - --router-addr=:{{ .Values.peers.routerPort }}
    - --metrics-addr=:{{ .Values.peers.metricsPort }}
    # The other nodes' pods: the addresses of the headless Service <fullname>-peers, ready or not.
    - --bootstrap-kind=dns
    - --dns-bootstrap-domain={{ include "holdfast.fullname" . }}-peers.{{ .Release.Namespace }}.svc.{{ .Values.peers.clusterDomain }}
    - --debug-web-enabled=false
    - --mirrored-registries
    {{- range .Values.peers.registries }}
    - {{ if eq (toString .) "_default" }}_default{{ else }}https://{{ . }}{{ end }}
    {{- end }}
  {{- if not $paths.contentRoot }}
  env:
    # Empty: blobs are read through containerd's content API (spegel's flag parser takes no empty value).
    - name: CONTAINERD_CONTENT_PATH
      value: ""
  {{- end }}
  ports:
    # The node's containerd reaches it at <node IP>:registryPort (holdfast's --peer-mirror).
    - name: peer-registry
      containerPort: {{ .Values.peers.registryPort }}
      hostPort: {{ .Values.peers.registryPort }}
      protocol: TCP
    # The other nodes' spegel reach the router and the registry at the pod's IP.
    - name: peer-router
      containerPort: {{ .Values.peers.routerPort }}
      protocol: TCP
    - name: peer-metrics
      containerPort: {{ .Values.peers.metricsPort }}
      protocol: TCP
  # No readiness probe: spegel is ready once it has a peer, never on a one-node cluster, and holdfast's
  # readiness is the pod's.
  livenessProbe:
    httpGet:
      path: /livez
      port: peer-registry
    periodSeconds: 20
    timeoutSeconds: 5
    failureThreshold: 6
  securityContext:
    # Root, for the root-owned containerd socket and content store, with no capability.
    runAsUser: 0
    runAsGroup: 0
    runAsNonRoot: false
    privileged: false
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: ["ALL"]
    {{- with .Values.seLinuxOptions }}
    seLinuxOptions:
      {{- toYaml . | nindent 6 }}
    {{- end }}
  {{- with .Values.peers.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    - name: containerd-socket-dir
      mountPath: {{ $paths.socketDir }}
      readOnly: true
    {{- if $paths.contentRoot }}
    - name: content-root
      mountPath: {{ $paths.contentRoot }}
      readOnly: true
    {{- end }}
{{- end -}}
