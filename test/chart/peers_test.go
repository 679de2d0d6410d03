package chart

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/holdfast-project/holdfast/internal/registries"
)

const (
	peerRegistryPort = 30020
	peerRouterPort   = 30021
)

func peerValues(extra map[string]any) map[string]any {
	peers := map[string]any{"enabled": true}
	for k, v := range extra {
		peers[k] = v
	}
	return map[string]any{"runtime": "containerd", "peers": peers}
}

func (r rendered) peersService() (corev1.Service, bool) {
	for _, s := range r.Services {
		if s.Name == fullname+"-peers" {
			return s, true
		}
	}
	return corev1.Service{}, false
}

// TestPeersOffByDefault: without peers.enabled nothing of it is rendered, for every runtime.
func TestPeersOffByDefault(t *testing.T) {
	for name := range presets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := render(t, map[string]any{"runtime": name})
			ds := r.daemonSet(t)
			for _, c := range ds.Spec.Template.Spec.Containers {
				if c.Name == "spegel" {
					t.Errorf("a spegel container is rendered")
				}
			}
			if _, ok := r.peersService(); ok {
				t.Errorf("the peers Service is rendered")
			}
			hf := container(t, ds, "holdfast")
			for _, e := range []string{"NODE_IP", "HOLDFAST_PULL_REQUIRED"} {
				if _, ok := env(hf, e); ok {
					t.Errorf("holdfast has %s", e)
				}
			}
			f := flags(hf.Args)
			for _, k := range []string{"peer-mirror", "peer-registries"} {
				if v, ok := f[k]; ok {
					t.Errorf("--%s %q given", k, v)
				}
			}
		})
	}
}

// TestPeersContainerd: on a plain containerd node, spegel runs beside holdfast from the same image, finds its
// peers through a headless Service (no API access, so no RBAC beyond the reporter's), serves the node's
// containerd on a hostPort; holdfast writes the mirror's hosts.toml files into certsDir (mounted read-write)
// and pulls the required images.
func TestPeersContainerd(t *testing.T) {
	t.Parallel()
	r := render(t, peerValues(nil))
	ds := r.daemonSet(t)
	pod := ds.Spec.Template.Spec
	if len(pod.Containers) != 3 {
		t.Fatalf("%d containers, want holdfast, spegel and the reporter", len(pod.Containers))
	}
	sp := container(t, ds, "spegel")
	hf := container(t, ds, "holdfast")
	if sp.Image != hf.Image || !slices.Equal(sp.Command, []string{"/spegel"}) || len(sp.Args) == 0 || sp.Args[0] != "registry" {
		t.Errorf("spegel runs %s %q %q, want holdfast's image %s running /spegel registry", sp.Image, sp.Command, sp.Args, hf.Image)
	}
	p := presets["containerd"]
	f := flags(sp.Args)
	want := map[string]string{
		"containerd-sock":         p.socket,
		"containerd-namespace":    "k8s.io",
		"containerd-content-path": p.contentRoot,
		"registry-addr":           ":30020",
		"router-addr":             ":30021",
		"metrics-addr":            ":30022",
		"bootstrap-kind":          "dns",
		"dns-bootstrap-domain":    fullname + "-peers." + namespace + ".svc.cluster.local",
		"debug-web-enabled":       "false",
		"log-level":               "INFO",
	}
	for k, v := range want {
		if !slices.Equal(f[k], []string{v}) {
			t.Errorf("spegel --%s %q, want %q", k, f[k], v)
		}
	}
	i := slices.Index(sp.Args, "--mirrored-registries")
	var mirrored []string
	if i >= 0 {
		mirrored = sp.Args[i+1:]
	}
	var wantMirrored []string
	for _, reg := range registries.DefaultPeerRegistries {
		wantMirrored = append(wantMirrored, "https://"+reg)
	}
	if !slices.Equal(mirrored, wantMirrored) {
		t.Errorf("spegel --mirrored-registries %q, want %q (last, as a list)", mirrored, wantMirrored)
	}

	// Ports: the registry on a hostPort for the node's containerd; the router on the pod IP.
	ports := map[string]corev1.ContainerPort{}
	for _, cp := range sp.Ports {
		ports[cp.Name] = cp
	}
	if cp := ports["peer-registry"]; cp.ContainerPort != peerRegistryPort || cp.HostPort != peerRegistryPort || cp.Protocol != corev1.ProtocolTCP {
		t.Errorf("peer-registry port %+v, want %d on the same hostPort", cp, peerRegistryPort)
	}
	if cp := ports["peer-router"]; cp.ContainerPort != peerRouterPort || cp.HostPort != 0 {
		t.Errorf("peer-router port %+v, want %d and no hostPort", cp, peerRouterPort)
	}
	if len(ports) != 3 {
		t.Errorf("spegel ports %+v, want registry, router and metrics", sp.Ports)
	}

	// Mounts: containerd's socket dir and content store, read-only; nothing else.
	hostPathAt(t, ds, sp, "/run/containerd", corev1.HostPathDirectory, true)
	m, _ := mountOf(t, ds, sp, p.contentRoot)
	if !m.ReadOnly {
		t.Errorf("spegel mounts the content store read-write")
	}
	if _, ok := env(sp, "CONTAINERD_CONTENT_PATH"); ok || len(sp.VolumeMounts) != 2 {
		t.Errorf("spegel mounts %+v, want the socket dir and the content store", sp.VolumeMounts)
	}
	sc := sp.SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("spegel securityContext %+v, want unprivileged, read-only root, no capability", sc)
	}
	if sp.ReadinessProbe != nil || sp.LivenessProbe == nil || sp.LivenessProbe.HTTPGet == nil || sp.LivenessProbe.HTTPGet.Path != "/livez" {
		t.Errorf("spegel probes: readiness %+v liveness %+v, want /livez alone", sp.ReadinessProbe, sp.LivenessProbe)
	}
	if sp.Resources.Limits.Memory().IsZero() {
		t.Errorf("spegel has no memory limit")
	}

	// holdfast: the mirror at the node's IP, the registries, required images pulled, certsDir writable.
	hff := flags(hf.Args)
	if !slices.Equal(hff["peer-mirror"], []string{"http://$(NODE_IP):30020"}) {
		t.Errorf("holdfast --peer-mirror %q", hff["peer-mirror"])
	}
	if !slices.Equal(hff["peer-registries"], []string{strings.Join(registries.DefaultPeerRegistries, ",")}) {
		t.Errorf("holdfast --peer-registries %q, want holdfast's own default", hff["peer-registries"])
	}
	if !slices.Equal(hff["registry-config"], []string{p.certsDir}) {
		t.Errorf("holdfast --registry-config %q, want certsDir %s", hff["registry-config"], p.certsDir)
	}
	hostPathAt(t, ds, hf, p.certsDir, corev1.HostPathDirectoryOrCreate, false)
	var nodeIP *corev1.EnvVar
	for i, e := range hf.Env {
		if e.Name == "NODE_IP" {
			nodeIP = &hf.Env[i]
		}
	}
	if nodeIP == nil || nodeIP.ValueFrom == nil || nodeIP.ValueFrom.FieldRef == nil || nodeIP.ValueFrom.FieldRef.FieldPath != "status.hostIP" {
		t.Errorf("holdfast NODE_IP %+v, want the downward API's status.hostIP", nodeIP)
	}
	if v, ok := env(hf, "HOLDFAST_PULL_REQUIRED"); !ok || v != "true" {
		t.Errorf("holdfast HOLDFAST_PULL_REQUIRED %q (%v), want true", v, ok)
	}

	// The peers Service: headless, not-ready pods included, selecting the DaemonSet's pods.
	s, ok := r.peersService()
	if !ok {
		t.Fatalf("no Service %s-peers", fullname)
	}
	if s.Spec.ClusterIP != corev1.ClusterIPNone || !s.Spec.PublishNotReadyAddresses || len(s.Spec.Selector) == 0 {
		t.Errorf("peers Service spec %+v, want headless with not-ready addresses", s.Spec)
	}
	for k, v := range s.Spec.Selector {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("peers Service selects %s=%s, which the pods lack", k, v)
		}
	}
	// No RBAC for spegel: the reporter's grants exactly.
	checkRBAC(t, r, reporterRules(true, true, true))
}

// TestPeersValues: the values change what spegel and holdfast are given, each as the other's parser takes it.
func TestPeersValues(t *testing.T) {
	t.Parallel()
	r := render(t, peerValues(map[string]any{
		"pullRequired": false, "registries": []string{"registry.example.com:5000", "_default"},
		"registryPort": 31000, "contentRoot": nil,
	}))
	ds := r.daemonSet(t)
	sp, hf := container(t, ds, "spegel"), container(t, ds, "holdfast")
	if i := slices.Index(sp.Args, "--mirrored-registries"); i < 0 || !slices.Equal(sp.Args[i+1:], []string{"https://registry.example.com:5000", "_default"}) {
		t.Errorf("spegel args %q", sp.Args)
	}
	hff := flags(hf.Args)
	if !slices.Equal(hff["peer-mirror"], []string{"http://$(NODE_IP):31000"}) || !slices.Equal(hff["peer-registries"], []string{"registry.example.com:5000,_default"}) {
		t.Errorf("holdfast args %q", hf.Args)
	}
	// What holdfast is given, its own parsers take.
	mirror := strings.ReplaceAll(hff["peer-mirror"][0], "$(NODE_IP)", "10.0.0.5")
	if _, err := (registries.File{}).WithPeerMirror(mirror, strings.Split(hff["peer-registries"][0], ",")); err != nil {
		t.Errorf("holdfast refuses the chart's --peer-registries: %v", err)
	}
	if _, ok := env(hf, "HOLDFAST_PULL_REQUIRED"); ok {
		t.Errorf("HOLDFAST_PULL_REQUIRED set with peers.pullRequired false")
	}

	// contentRoot none: spegel reads blobs through containerd's API.
	r = render(t, map[string]any{"runtime": "containerd", "contentRoot": "none", "peers": map[string]any{"enabled": true}})
	sp = container(t, r.daemonSet(t), "spegel")
	v, ok := env(sp, "CONTAINERD_CONTENT_PATH")
	if _, given := flags(sp.Args)["containerd-content-path"]; given || !ok || v != "" || len(sp.VolumeMounts) != 1 {
		t.Errorf("contentRoot none: spegel args %q, CONTAINERD_CONTENT_PATH %q (%v), mounts %+v; want the variable empty and no flag (spegel's parser refuses an empty flag value)", sp.Args, v, ok, sp.VolumeMounts)
	}
}

// TestPeersPullRequiredAlone: with K3s or RKE2 (spegel embedded) peers.pullRequired alone turns pulls on.
func TestPeersPullRequiredAlone(t *testing.T) {
	for _, rt := range []string{"k3s", "rke2"} {
		t.Run(rt, func(t *testing.T) {
			t.Parallel()
			r := render(t, map[string]any{"runtime": rt, "peers": map[string]any{"pullRequired": true}})
			ds := r.daemonSet(t)
			hf := container(t, ds, "holdfast")
			if v, _ := env(hf, "HOLDFAST_PULL_REQUIRED"); v != "true" {
				t.Errorf("HOLDFAST_PULL_REQUIRED %q, want true", v)
			}
			if len(ds.Spec.Template.Spec.Containers) != 2 {
				t.Errorf("%d containers, want holdfast and the reporter", len(ds.Spec.Template.Spec.Containers))
			}
			if _, ok := env(hf, "NODE_IP"); ok {
				t.Errorf("NODE_IP set without peers")
			}
		})
	}
}

// TestPeersBadValuesFail: peers on K3s/RKE2 (spegel embedded) or where holdfast cannot write the node's
// hosts.toml fail the template, saying why.
func TestPeersBadValuesFail(t *testing.T) {
	t.Parallel()
	on := map[string]any{"enabled": true}
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   []string
	}{
		{"k3s", map[string]any{"runtime": "k3s", "peers": on}, []string{"runtime k3s embeds spegel", "embedded-registry: true", "peers.pullRequired alone"}},
		{"rke2", map[string]any{"runtime": "rke2", "peers": on}, []string{"runtime rke2 embeds spegel", "embedded-registry: true", "peers.pullRequired alone"}},
		{"no certsDir", map[string]any{"runtime": "containerd", "certsDir": "none", "peers": on}, []string{"certsDir must be set"}},
		{"registriesYaml", map[string]any{"runtime": "containerd", "registriesYaml": "/etc/registries.yaml", "peers": on}, []string{`registriesYaml "none"`}},
		{"no registries", peerValues(map[string]any{"registries": []string{}}), []string{"peers.registries is empty"}},
		{"ports", peerValues(map[string]any{"routerPort": 30020}), []string{"must differ"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := helm(t, "template", release, chartDir(t), "-f", valuesFile(t, tc.values))
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("helm template with %v: %v, want an error saying %q", tc.values, err, w)
				}
			}
		})
	}
}
