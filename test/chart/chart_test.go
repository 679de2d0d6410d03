// Package chart tests the Helm chart deploy/helm/holdfast: helm lint, and
// helm template for each runtime preset and each optional object, every
// document decoded strictly into its Kubernetes type; metric names in alerts
// and the dashboard checked against holdfast's real registry; the cluster pin
// set read back by holdfast's own list parser and scan, in the layout the
// kubelet gives a ConfigMap volume.
package chart

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/holdfast-project/holdfast/internal/metrics"
	hfreport "github.com/holdfast-project/holdfast/internal/report"
	"github.com/holdfast-project/holdfast/internal/signature"
	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
	"github.com/holdfast-project/holdfast/internal/source"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

const (
	release   = "hf"
	namespace = "holdfast-system"
	fullname  = "hf-holdfast" // <release>-holdfast
	agentPort = 9747
	// clusterDir is where the pin set ConfigMap is mounted in the pod.
	clusterDir = "/etc/holdfast/cluster"
)

// repoRoot is the module root: go test runs a package's tests in the
// package's directory (with -trimpath, as make test builds, file paths in the
// binary say nothing).
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(wd, "..", "..")
}

func chartDir(t *testing.T) string { return filepath.Join(repoRoot(t), "deploy", "helm", "holdfast") }

// helmBin is bin/helm (make deps), else helm on PATH.
func helmBin(t *testing.T) string {
	t.Helper()
	p := filepath.Join(repoRoot(t), "bin", "helm")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	testenv.Missing(t, "cluster", "helm is neither in bin/ nor on PATH (make deps builds it)")
	return ""
}

// helm runs helm with args and returns its stdout; a non-zero exit is an
// error that carries helm's stderr.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

func valuesFile(t *testing.T, values map[string]any) string {
	t.Helper()
	data, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// serviceMonitor holds the fields of a monitoring.coreos.com/v1 ServiceMonitor the chart writes; strict
// decoding fails on any other.
type serviceMonitor struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
			Relabelings   []struct {
				SourceLabels []string `json:"sourceLabels"`
				TargetLabel  string   `json:"targetLabel"`
				Action       string   `json:"action"`
			} `json:"relabelings"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// prometheusRule holds the fields of a monitoring.coreos.com/v1 PrometheusRule the chart writes.
type prometheusRule struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// rendered is the output of helm template, decoded.
type rendered struct {
	DaemonSets          []appsv1.DaemonSet
	ConfigMaps          []corev1.ConfigMap
	Services            []corev1.Service
	ServiceAccounts     []corev1.ServiceAccount
	ClusterRoles        []rbacv1.ClusterRole
	ClusterRoleBindings []rbacv1.ClusterRoleBinding
	Roles               []rbacv1.Role
	RoleBindings        []rbacv1.RoleBinding
	Policies            []admissionv1.ValidatingAdmissionPolicy
	PolicyBindings      []admissionv1.ValidatingAdmissionPolicyBinding
	ServiceMonitors     []serviceMonitor
	PrometheusRules     []prometheusRule
	CRDs                []crd
}

// crd is what the test reads of a CustomResourceDefinition (the API server checks the rest: test/cluster).
type crd struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		Group string `json:"group"`
		Scope string `json:"scope"`
		Names struct {
			Kind   string `json:"kind"`
			Plural string `json:"plural"`
		} `json:"names"`
		Versions []struct {
			Name                     string         `json:"name"`
			Served                   bool           `json:"served"`
			Storage                  bool           `json:"storage"`
			Subresources             map[string]any `json:"subresources"`
			AdditionalPrinterColumns []struct {
				Name     string `json:"name"`
				Type     string `json:"type"`
				JSONPath string `json:"jsonPath"`
			} `json:"additionalPrinterColumns"`
			Schema struct {
				OpenAPIV3Schema schemaProp `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

// schemaProp is a node of an OpenAPI v3 schema.
type schemaProp struct {
	Type                 string                `json:"type"`
	Format               string                `json:"format"`
	Description          string                `json:"description"`
	Properties           map[string]schemaProp `json:"properties"`
	Items                *schemaProp           `json:"items"`
	AdditionalProperties *schemaProp           `json:"additionalProperties"`
	Required             []string              `json:"required"`
	MinItems             *int64                `json:"minItems"`
	MaxItems             *int64                `json:"maxItems"`
	Minimum              *float64              `json:"minimum"`
	Enum                 []string              `json:"enum"`
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// decode splits helm's output into documents and decodes each strictly into the type of its kind.
func decode(t *testing.T, out string) rendered {
	t.Helper()
	var r rendered
	for _, doc := range docSep.Split(out, -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("reading the kind of a rendered document: %v\n%s", err, doc)
		}
		strict := func(want string, v any) {
			t.Helper()
			if tm.APIVersion != want {
				t.Fatalf("%s has apiVersion %q, want %q", tm.Kind, tm.APIVersion, want)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
				t.Fatalf("decoding the %s strictly: %v\n%s", tm.Kind, err, doc)
			}
		}
		var meta struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("reading the metadata of a %s: %v", tm.Kind, err)
		}
		checkMeta(t, tm.Kind, meta.Metadata)
		switch tm.Kind {
		case "DaemonSet":
			var o appsv1.DaemonSet
			strict("apps/v1", &o)
			r.DaemonSets = append(r.DaemonSets, o)
		case "ConfigMap":
			var o corev1.ConfigMap
			strict("v1", &o)
			for k := range o.Data {
				for _, msg := range validation.IsConfigMapKey(k) {
					t.Errorf("ConfigMap %s key %q: %s", o.Name, k, msg)
				}
			}
			r.ConfigMaps = append(r.ConfigMaps, o)
		case "Service":
			var o corev1.Service
			strict("v1", &o)
			r.Services = append(r.Services, o)
		case "ServiceAccount":
			var o corev1.ServiceAccount
			strict("v1", &o)
			r.ServiceAccounts = append(r.ServiceAccounts, o)
		case "ClusterRole":
			var o rbacv1.ClusterRole
			strict("rbac.authorization.k8s.io/v1", &o)
			r.ClusterRoles = append(r.ClusterRoles, o)
		case "ClusterRoleBinding":
			var o rbacv1.ClusterRoleBinding
			strict("rbac.authorization.k8s.io/v1", &o)
			r.ClusterRoleBindings = append(r.ClusterRoleBindings, o)
		case "Role":
			var o rbacv1.Role
			strict("rbac.authorization.k8s.io/v1", &o)
			r.Roles = append(r.Roles, o)
		case "RoleBinding":
			var o rbacv1.RoleBinding
			strict("rbac.authorization.k8s.io/v1", &o)
			r.RoleBindings = append(r.RoleBindings, o)
		case "ValidatingAdmissionPolicy":
			var o admissionv1.ValidatingAdmissionPolicy
			strict("admissionregistration.k8s.io/v1", &o)
			r.Policies = append(r.Policies, o)
		case "ValidatingAdmissionPolicyBinding":
			var o admissionv1.ValidatingAdmissionPolicyBinding
			strict("admissionregistration.k8s.io/v1", &o)
			r.PolicyBindings = append(r.PolicyBindings, o)
		case "ServiceMonitor":
			var o serviceMonitor
			strict("monitoring.coreos.com/v1", &o)
			r.ServiceMonitors = append(r.ServiceMonitors, o)
		case "PrometheusRule":
			var o prometheusRule
			strict("monitoring.coreos.com/v1", &o)
			r.PrometheusRules = append(r.PrometheusRules, o)
		case "CustomResourceDefinition":
			var o crd
			if tm.APIVersion != "apiextensions.k8s.io/v1" {
				t.Fatalf("CustomResourceDefinition has apiVersion %q", tm.APIVersion)
			}
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Fatalf("decoding the CustomResourceDefinition: %v\n%s", err, doc)
			}
			r.CRDs = append(r.CRDs, o)
		default:
			t.Fatalf("the chart renders a %s %s the test does not know", tm.APIVersion, tm.Kind)
		}
	}
	return r
}

// checkMeta validates an object's name and labels as the API server would.
func checkMeta(t *testing.T, kind string, m metav1.ObjectMeta) {
	t.Helper()
	for _, msg := range validation.IsDNS1123Subdomain(m.Name) {
		t.Errorf("%s name %q: %s", kind, m.Name, msg)
	}
	for k, v := range m.Labels {
		for _, msg := range append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...) {
			t.Errorf("%s %s label %s=%s: %s", kind, m.Name, k, v, msg)
		}
	}
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// render runs helm lint and helm template with values, and decodes the output.
func render(t *testing.T, values map[string]any) rendered {
	t.Helper()
	vf := valuesFile(t, values)
	if out, err := helm(t, "lint", "--strict", chartDir(t), "-f", vf); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	out, err := helm(t, "template", release, chartDir(t), "--namespace", namespace, "-f", vf)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

// crd is the CustomResourceDefinition of that name.
func (r rendered) crd(name string) (crd, bool) {
	for _, c := range r.CRDs {
		if c.Metadata.Name == name {
			return c, true
		}
	}
	return crd{}, false
}

func (r rendered) daemonSet(t *testing.T) appsv1.DaemonSet {
	t.Helper()
	if len(r.DaemonSets) != 1 {
		t.Fatalf("%d DaemonSets rendered, want 1", len(r.DaemonSets))
	}
	return r.DaemonSets[0]
}

func (r rendered) configMap(t *testing.T, name string) corev1.ConfigMap {
	t.Helper()
	for _, cm := range r.ConfigMaps {
		if cm.Name == name {
			return cm
		}
	}
	t.Fatalf("no ConfigMap %s rendered", name)
	return corev1.ConfigMap{}
}

func container(t *testing.T, ds appsv1.DaemonSet, name string) corev1.Container {
	t.Helper()
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("DaemonSet %s has no container %s", ds.Name, name)
	return corev1.Container{}
}

// env is the value the container's environment gives name.
func env(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

func volume(ds appsv1.DaemonSet, name string) (corev1.Volume, bool) {
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return v, true
		}
	}
	return corev1.Volume{}, false
}

// mountOf finds the mount of c at path and the volume behind it.
func mountOf(t *testing.T, ds appsv1.DaemonSet, c corev1.Container, path string) (corev1.VolumeMount, corev1.Volume) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			v, ok := volume(ds, m.Name)
			if !ok {
				t.Fatalf("container %s mounts volume %s at %s, which the pod does not have", c.Name, m.Name, path)
			}
			return m, v
		}
	}
	t.Fatalf("container %s mounts nothing at %s; mounts: %+v", c.Name, path, c.VolumeMounts)
	return corev1.VolumeMount{}, corev1.Volume{}
}

// hostPathAt asserts that c has the node's path mounted at the same path, from a hostPath volume of type typ.
func hostPathAt(t *testing.T, ds appsv1.DaemonSet, c corev1.Container, path string, typ corev1.HostPathType, readOnly bool) {
	t.Helper()
	m, v := mountOf(t, ds, c, path)
	if v.HostPath == nil {
		t.Fatalf("%s is mounted from volume %s, not a hostPath: %+v", path, v.Name, v.VolumeSource)
	}
	if v.HostPath.Path != path {
		t.Errorf("%s is mounted from the node's %s, want the same path", path, v.HostPath.Path)
	}
	if v.HostPath.Type == nil || *v.HostPath.Type != typ {
		t.Errorf("hostPath %s has type %v, want %s", path, v.HostPath.Type, typ)
	}
	if m.ReadOnly != readOnly {
		t.Errorf("%s mounted readOnly=%v, want %v", path, m.ReadOnly, readOnly)
	}
	if m.SubPath != "" || m.SubPathExpr != "" {
		t.Errorf("%s is mounted with a subPath", path)
	}
}

// flags maps each --flag=value of args to its values.
func flags(args []string) map[string][]string {
	out := map[string][]string{}
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(k, "--") {
			out[strings.TrimPrefix(k, "--")] = append(out[strings.TrimPrefix(k, "--")], v)
		}
	}
	return out
}

type nodePaths struct {
	socket, imagesDir, registriesYAML, certsDir, contentRoot, dataDir string
	directWrites                                                      bool // blobs written into contentRoot
}

var presets = map[string]nodePaths{
	"k3s": {
		socket:         "/run/k3s/containerd/containerd.sock",
		imagesDir:      "/var/lib/rancher/k3s/agent/images",
		registriesYAML: "/etc/rancher/k3s/registries.yaml",
		certsDir:       "/var/lib/rancher/k3s/agent/etc/containerd/certs.d",
		contentRoot:    "/var/lib/rancher/k3s/agent/containerd/io.containerd.content.v1.content",
		dataDir:        "/var/lib/holdfast/data",
	},
	"rke2": {
		socket:         "/run/k3s/containerd/containerd.sock",
		imagesDir:      "/var/lib/rancher/rke2/agent/images",
		registriesYAML: "/etc/rancher/rke2/registries.yaml",
		certsDir:       "/var/lib/rancher/rke2/agent/etc/containerd/certs.d",
		contentRoot:    "/var/lib/rancher/rke2/agent/containerd/io.containerd.content.v1.content",
		dataDir:        "/var/lib/holdfast/data",
	},
	"containerd": {
		socket:      "/run/containerd/containerd.sock",
		imagesDir:   "/var/lib/holdfast/images",
		certsDir:    "/etc/containerd/certs.d",
		contentRoot: "/var/lib/containerd/io.containerd.content.v1.content",
		dataDir:     "/var/lib/holdfast/data",
	},
}

// checkPaths asserts the agent's flags and mounts for the node paths p.
func checkPaths(t *testing.T, ds appsv1.DaemonSet, p nodePaths) {
	t.Helper()
	hf := container(t, ds, "holdfast")
	if len(hf.Command) != 1 || hf.Command[0] != "/holdfast" || len(hf.Args) == 0 || hf.Args[0] != "run" {
		t.Fatalf("holdfast container runs %q %q, want /holdfast run ...", hf.Command, hf.Args)
	}
	f := flags(hf.Args)
	want := map[string][]string{
		"listen":     {fmt.Sprintf("0.0.0.0:%d", agentPort)},
		"address":    {p.socket},
		"images":     {p.imagesDir, clusterDir},
		"data-dir":   {p.dataDir},
		"write-path": {"stream"},
	}
	if p.directWrites && p.contentRoot != "" {
		want["write-path"] = []string{"auto"}
	}
	if p.contentRoot != "" {
		// Given, so that the agent proves it is containerd's store and says when it is not.
		want["content-root"] = []string{p.contentRoot}
	} else if v, ok := f["content-root"]; ok {
		t.Errorf("--content-root %q given, want none", v)
	}
	switch {
	case p.registriesYAML != "":
		// holdfast writes the hosts.toml files it makes from registries.yaml into a dir of its own: K3s rewrites
		// its certs.d at start, and holdfast never overwrites a hosts.toml it did not write.
		want["registries-yaml"] = []string{p.registriesYAML}
		want["registry-config"] = []string{p.dataDir + "/registry.d"}
	case p.certsDir != "":
		want["registry-config"] = []string{p.certsDir}
	}
	for k, v := range want {
		if !slices.Equal(f[k], v) {
			t.Errorf("--%s: %q, want %q (args %q)", k, f[k], v, hf.Args)
		}
	}
	if p.registriesYAML == "" {
		if v, ok := f["registries-yaml"]; ok {
			t.Errorf("--registries-yaml %q given, want none", v)
		}
	}
	if p.registriesYAML == "" && p.certsDir == "" {
		if v, ok := f["registry-config"]; ok {
			t.Errorf("--registry-config %q given, want none", v)
		}
	}

	// The socket's directory, never the socket file: containerd makes a new socket when it restarts.
	hostPathAt(t, ds, hf, filepath.Dir(p.socket), corev1.HostPathDirectory, true)
	for _, m := range hf.VolumeMounts {
		if m.MountPath == p.socket {
			t.Errorf("the socket file itself is mounted (%s)", m.Name)
		}
	}
	hostPathAt(t, ds, hf, p.imagesDir, corev1.HostPathDirectoryOrCreate, false)
	hostPathAt(t, ds, hf, p.dataDir, corev1.HostPathDirectoryOrCreate, false)
	hostPaths := map[string]bool{filepath.Dir(p.socket): true, p.imagesDir: true, p.dataDir: true}
	if p.registriesYAML != "" {
		// Its directory: a node without it still starts the agent.
		hostPathAt(t, ds, hf, filepath.Dir(p.registriesYAML), corev1.HostPathDirectoryOrCreate, true)
		hostPaths[filepath.Dir(p.registriesYAML)] = true
	} else if p.certsDir != "" {
		hostPathAt(t, ds, hf, p.certsDir, corev1.HostPathDirectoryOrCreate, true)
		hostPaths[p.certsDir] = true
	}
	if p.contentRoot != "" {
		// Unchecked: a node without it still starts the agent.
		hostPathAt(t, ds, hf, p.contentRoot, corev1.HostPathUnset, !p.directWrites)
		hostPaths[p.contentRoot] = true
	}
	// No hostPath beyond what the agent needs.
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil && !hostPaths[v.HostPath.Path] {
			t.Errorf("volume %s mounts the node's %s, which this configuration does not need", v.Name, v.HostPath.Path)
		}
	}
	if n := countHostPaths(ds); n != len(hostPaths) {
		t.Errorf("%d hostPath volumes, want %d (%v)", n, len(hostPaths), hostPaths)
	}

	// The pin set: the whole ConfigMap volume, read-only, also passed as an images dir.
	m, v := mountOf(t, ds, hf, clusterDir)
	if v.ConfigMap == nil || v.ConfigMap.Name != fullname {
		t.Errorf("%s is mounted from %+v, want ConfigMap %s", clusterDir, v.VolumeSource, fullname)
	}
	if v.ConfigMap != nil && len(v.ConfigMap.Items) != 0 {
		t.Errorf("the ConfigMap volume picks items %v: every key must be there", v.ConfigMap.Items)
	}
	if !m.ReadOnly || m.SubPath != "" || m.SubPathExpr != "" {
		t.Errorf("the pin set is mounted %+v, want read-only and without subPath (the kubelet never updates a subPath)", m)
	}
}

func countHostPaths(ds appsv1.DaemonSet) int {
	n := 0
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			n++
		}
	}
	return n
}

// checkHardened asserts the pod's security settings, its probes and its rollout.
func checkHardened(t *testing.T, r rendered) {
	t.Helper()
	ds := r.daemonSet(t)
	if ds.Name != fullname || ds.Namespace != namespace {
		t.Errorf("DaemonSet %s/%s, want %s/%s", ds.Namespace, ds.Name, namespace, fullname)
	}
	pod := ds.Spec.Template.Spec
	if pod.HostNetwork || pod.HostPID || pod.HostIPC {
		t.Errorf("hostNetwork %v hostPID %v hostIPC %v, want none", pod.HostNetwork, pod.HostPID, pod.HostIPC)
	}
	if pod.SecurityContext == nil || pod.SecurityContext.SeccompProfile == nil || pod.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod seccomp profile %+v, want RuntimeDefault", pod.SecurityContext)
	}
	if pod.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName %q", pod.PriorityClassName)
	}
	if len(pod.Tolerations) != 1 || pod.Tolerations[0].Operator != corev1.TolerationOpExists || pod.Tolerations[0].Key != "" || pod.Tolerations[0].Effect != "" {
		t.Errorf("tolerations %+v, want one {operator: Exists}", pod.Tolerations)
	}
	if pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds < 30 {
		t.Errorf("terminationGracePeriodSeconds %v, want at least 30", pod.TerminationGracePeriodSeconds)
	}
	if pod.ServiceAccountName != fullname {
		t.Errorf("serviceAccountName %q, want %s", pod.ServiceAccountName, fullname)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("automountServiceAccountToken %v, want false (the reporter mounts its token itself)", pod.AutomountServiceAccountToken)
	}
	us := ds.Spec.UpdateStrategy
	if us.Type != appsv1.RollingUpdateDaemonSetStrategyType || us.RollingUpdate == nil ||
		us.RollingUpdate.MaxUnavailable == nil || us.RollingUpdate.MaxUnavailable.String() != "1" ||
		us.RollingUpdate.MaxSurge == nil || us.RollingUpdate.MaxSurge.String() != "0" {
		t.Errorf("updateStrategy %+v, want RollingUpdate maxUnavailable 1 maxSurge 0", us)
	}
	if tmp, ok := volume(ds, "tmp"); !ok || tmp.EmptyDir == nil {
		t.Errorf("no emptyDir volume tmp")
	}
	if len(pod.Containers) != 2 || len(pod.InitContainers) != 0 {
		t.Fatalf("%d containers and %d init containers, want holdfast and reporter", len(pod.Containers), len(pod.InitContainers))
	}
	for _, c := range pod.Containers {
		if c.Image != "ghcr.io/holdfast-project/holdfast:0.1.0" {
			t.Errorf("container %s image %q, want ghcr.io/holdfast-project/holdfast:<appVersion>", c.Name, c.Image)
		}
		if c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("container %s imagePullPolicy %q", c.Name, c.ImagePullPolicy)
		}
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("container %s has no securityContext", c.Name)
			continue
		}
		if sc.Privileged == nil || *sc.Privileged {
			t.Errorf("container %s privileged %v, want false", c.Name, sc.Privileged)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("container %s allowPrivilegeEscalation %v, want false", c.Name, sc.AllowPrivilegeEscalation)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("container %s readOnlyRootFilesystem %v, want true", c.Name, sc.ReadOnlyRootFilesystem)
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
			t.Errorf("container %s capabilities %+v, want drop [ALL] and nothing added", c.Name, sc.Capabilities)
		}
		if sc.SeccompProfile != nil && sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("container %s overrides the seccomp profile: %+v", c.Name, sc.SeccompProfile)
		}
		if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("container %s resources %+v, want memory requests and limits", c.Name, c.Resources)
		}
	}
	hf := container(t, ds, "holdfast")
	if hf.SecurityContext.RunAsUser == nil || *hf.SecurityContext.RunAsUser != 0 {
		t.Errorf("holdfast runAsUser %v, want 0 (the containerd socket and archives are root's)", hf.SecurityContext.RunAsUser)
	}
	for _, m := range hf.VolumeMounts {
		if strings.HasPrefix(m.MountPath, "/var/run/secrets") {
			t.Errorf("holdfast mounts %s (%s): it needs no API token", m.MountPath, m.Name)
		}
	}
	if len(hf.Ports) != 1 || hf.Ports[0].Name != "metrics" || hf.Ports[0].ContainerPort != agentPort {
		t.Errorf("holdfast ports %+v, want metrics %d", hf.Ports, agentPort)
	}
	probe := func(what string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s probe %+v, want GET %s on port metrics", what, p, path)
		}
	}
	probe("liveness", hf.LivenessProbe, "/healthz")
	probe("readiness", hf.ReadinessProbe, "/readyz")

	rep := container(t, ds, "reporter")
	if !slices.Equal(rep.Command, []string{"/holdfast-reporter"}) {
		t.Errorf("reporter runs %q", rep.Command)
	}
	if rep.SecurityContext.RunAsUser == nil || *rep.SecurityContext.RunAsUser != 65534 ||
		rep.SecurityContext.RunAsNonRoot == nil || !*rep.SecurityContext.RunAsNonRoot {
		t.Errorf("reporter runs as %v (runAsNonRoot %v), want 65534", rep.SecurityContext.RunAsUser, rep.SecurityContext.RunAsNonRoot)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range rep.Env {
		env[e.Name] = e
	}
	if e := env["NODE_NAME"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("reporter NODE_NAME %+v, want the downward API's spec.nodeName", e)
	}
	if e := env["HOLDFAST_AGENT"]; e.Value != fmt.Sprintf("http://127.0.0.1:%d", agentPort) {
		t.Errorf("reporter HOLDFAST_AGENT %q", e.Value)
	}
	checkAgentToken(t, ds, hf, rep)
	m, v := mountOf(t, ds, rep, "/var/run/secrets/kubernetes.io/serviceaccount")
	if !m.ReadOnly || v.Projected == nil {
		t.Fatalf("reporter's API token mount %+v from %+v, want a read-only projected volume", m, v.VolumeSource)
	}
	var token, ca, ns bool
	for _, s := range v.Projected.Sources {
		token = token || (s.ServiceAccountToken != nil && s.ServiceAccountToken.Path == "token")
		ca = ca || (s.ConfigMap != nil && s.ConfigMap.Name == "kube-root-ca.crt" && len(s.ConfigMap.Items) == 1 && s.ConfigMap.Items[0].Path == "ca.crt")
		ns = ns || (s.DownwardAPI != nil && len(s.DownwardAPI.Items) == 1 && s.DownwardAPI.Items[0].Path == "namespace")
	}
	if !token || !ca || !ns {
		t.Errorf("the reporter's projected volume has token %v, ca.crt %v, namespace %v: client-go's in-cluster config needs all three", token, ca, ns)
	}
}

// checkAgentToken asserts how the reporter gets the agent's token, which PUT /required needs: the agent keeps it
// in a directory of its data dir (--token-file), and the reporter mounts that directory alone, read-only, from the
// same volume, and reads the file (mode 0640, root's group) by root's group, not as root.
func checkAgentToken(t *testing.T, ds appsv1.DaemonSet, hf, rep corev1.Container) {
	t.Helper()
	dataDir := flags(hf.Args)["data-dir"]
	tokenFile := flags(hf.Args)["token-file"]
	if len(dataDir) != 1 || !slices.Equal(tokenFile, []string{dataDir[0] + "/reporter/token"}) {
		t.Fatalf("holdfast --token-file %q, want <data-dir>/reporter/token (data dir %q)", tokenFile, dataDir)
	}
	if v, ok := env(rep, "HOLDFAST_TOKEN_FILE"); !ok || v != "/run/holdfast/token" {
		t.Errorf("reporter HOLDFAST_TOKEN_FILE %q, want /run/holdfast/token", v)
	}
	m, v := mountOf(t, ds, rep, "/run/holdfast")
	agentData, _ := mountOf(t, ds, hf, dataDir[0])
	if v.Name != agentData.Name || m.SubPath != "reporter" || !m.ReadOnly {
		t.Errorf("reporter's /run/holdfast is %+v, want the subPath reporter of the agent's data volume %s, read-only", m, agentData.Name)
	}
	sc := rep.SecurityContext
	if sc.RunAsGroup == nil || *sc.RunAsGroup != 0 || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("reporter runs as uid %v gid %v, want a user other than root in root's group", sc.RunAsUser, sc.RunAsGroup)
	}
}

// reporterRules are the reporter's grants, group/resource → sorted verbs: nodes get, nodes/status patch,
// events create, patch and list; with required images, pods read; with cluster workloads, the workloads
// read and nodes list and watch; with required images and the ImageSets (sets), the ImageSets read, their
// status written, every NodeImages and the Nodes listed and watched.
func reporterRules(required, clusterWorkloads, sets bool) map[string][]string {
	rules := map[string][]string{"/nodes": {"get"}, "/nodes/status": {"patch"}, "/events": {"create", "list", "patch"}}
	read := []string{"get", "list", "watch"}
	if required {
		rules["/pods"] = read
		rules["holdfast.io/nodeimages"] = []string{"create", "get", "patch"}
	}
	if required && clusterWorkloads {
		rules["/nodes"] = read
		for _, gr := range []string{"apps/deployments", "apps/statefulsets", "apps/daemonsets", "apps/replicasets",
			"batch/jobs", "batch/cronjobs", "/replicationcontrollers"} {
			rules[gr] = read
		}
	}
	if required && sets {
		rules["/nodes"] = read
		rules["holdfast.io/nodeimages"] = []string{"create", "get", "list", "patch", "watch"}
		rules["holdfast.io/imagesets"] = read
		rules["holdfast.io/imagesets/status"] = []string{"patch", "update"}
	}
	return rules
}

// checkRBAC asserts exactly the reporter's RBAC: want (reporterRules), a binding to its service account,
// and the admission policy that keeps each reporter to its own Node.
func checkRBAC(t *testing.T, r rendered, want map[string][]string) {
	t.Helper()
	if len(r.ServiceAccounts) != 1 || r.ServiceAccounts[0].Name != fullname || r.ServiceAccounts[0].Namespace != namespace {
		t.Fatalf("ServiceAccounts %+v, want %s/%s", r.ServiceAccounts, namespace, fullname)
	}
	if len(r.ClusterRoles) != 1 || len(r.ClusterRoleBindings) != 1 {
		t.Fatalf("%d ClusterRoles and %d ClusterRoleBindings, want one each", len(r.ClusterRoles), len(r.ClusterRoleBindings))
	}
	got := map[string][]string{}
	for _, rule := range r.ClusterRoles[0].Rules {
		if len(rule.NonResourceURLs) != 0 || len(rule.ResourceNames) != 0 {
			t.Errorf("rule %+v: want resources only", rule)
		}
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				key := g + "/" + res
				got[key] = append(got[key], rule.Verbs...)
			}
		}
	}
	for k := range got {
		sort.Strings(got[k])
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ClusterRole grants %v, want exactly %v", got, want)
	}
	b := r.ClusterRoleBindings[0]
	if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != r.ClusterRoles[0].Name || b.RoleRef.APIGroup != rbacv1.GroupName {
		t.Errorf("binding's roleRef %+v", b.RoleRef)
	}
	if len(b.Subjects) != 1 || b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Name != fullname || b.Subjects[0].Namespace != namespace {
		t.Errorf("binding's subjects %+v, want ServiceAccount %s/%s", b.Subjects, namespace, fullname)
	}
	// Each reporter writes only its own Node (the policy's CEL is exercised on the cluster, test/cluster).
	if len(r.Policies) != 1 || len(r.PolicyBindings) != 1 {
		t.Fatalf("%d ValidatingAdmissionPolicies and %d bindings, want one each", len(r.Policies), len(r.PolicyBindings))
	}
	p, pb := r.Policies[0], r.PolicyBindings[0]
	if pb.Spec.PolicyName != p.Name || len(pb.Spec.ValidationActions) != 1 || pb.Spec.ValidationActions[0] != admissionv1.Deny {
		t.Errorf("policy binding %+v does not deny by policy %s", pb.Spec, p.Name)
	}
	sa := "system:serviceaccount:" + namespace + ":" + fullname
	if len(p.Spec.MatchConditions) != 1 || !strings.Contains(p.Spec.MatchConditions[0].Expression, `"`+sa+`"`) {
		t.Errorf("policy match conditions %+v, want the reporter's service account %s", p.Spec.MatchConditions, sa)
	}
}

func checkService(t *testing.T, r rendered, ds appsv1.DaemonSet) {
	t.Helper()
	if len(r.Services) != 1 {
		t.Fatalf("%d Services, want 1", len(r.Services))
	}
	s := r.Services[0]
	if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Name != "metrics" || s.Spec.Ports[0].Port != agentPort || s.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("Service ports %+v, want metrics %d", s.Spec.Ports, agentPort)
	}
	for k, v := range s.Spec.Selector {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("Service selects %s=%s, which the pods lack", k, v)
		}
	}
	if len(s.Spec.Selector) == 0 {
		t.Error("Service selects nothing")
	}
}

func TestPresets(t *testing.T) {
	for name, p := range presets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := render(t, map[string]any{"runtime": name})
			ds := r.daemonSet(t)
			checkPaths(t, ds, p)
			checkHardened(t, r)
			checkRBAC(t, r, reporterRules(true, true, true))
			checkService(t, r, ds)
			if len(r.ServiceMonitors)+len(r.PrometheusRules) != 0 || len(r.ConfigMaps) != 1 {
				t.Errorf("optional objects rendered by default: %d ServiceMonitors, %d PrometheusRules, %d ConfigMaps",
					len(r.ServiceMonitors), len(r.PrometheusRules), len(r.ConfigMaps))
			}
		})
	}
}

// TestNodePathsOverride sets every path, as the cluster test does for its node.
func TestNodePathsOverride(t *testing.T) {
	t.Parallel()
	p := nodePaths{
		socket:    "/tmp/hf-node/run/containerd/containerd.sock",
		imagesDir: "/tmp/hf-node/images",
		dataDir:   "/tmp/hf-node/holdfast",
	}
	r := render(t, map[string]any{
		"runtime":          "k3s",
		"containerdSocket": p.socket,
		"imagesDir":        p.imagesDir,
		"dataDir":          p.dataDir,
		"registriesYaml":   "none",
		"certsDir":         "none",
		"contentRoot":      "none",
	})
	checkPaths(t, r.daemonSet(t), p)
	checkHardened(t, r)

	p.certsDir = "/tmp/hf-node/certs.d"
	p.contentRoot = "/tmp/hf-node/containerd/io.containerd.content.v1.content"
	r = render(t, map[string]any{
		"runtime": "containerd", "containerdSocket": p.socket, "imagesDir": p.imagesDir, "dataDir": p.dataDir,
		"certsDir": p.certsDir, "contentRoot": p.contentRoot,
	})
	checkPaths(t, r.daemonSet(t), p)

	// Direct writes: the content root read-write, and auto.
	p.directWrites = true
	r = render(t, map[string]any{
		"runtime": "containerd", "containerdSocket": p.socket, "imagesDir": p.imagesDir, "dataDir": p.dataDir,
		"certsDir": p.certsDir, "contentRoot": p.contentRoot, "directWrites": true,
	})
	checkPaths(t, r.daemonSet(t), p)
	checkHardened(t, r)
}

func TestBadValuesFail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"runtime", map[string]any{"runtime": "docker"}, `runtime "docker"`},
		{"relative path", map[string]any{"imagesDir": "images"}, `imagesDir "images"`},
		{"one path twice", map[string]any{"imagesDir": "/var/lib/holdfast/data"}, "two node paths are the same"},
		{"pin with a space", map[string]any{"pins": []string{"nginx nginx"}}, `pins[0] "nginx nginx"`},
		{"pull list name", map[string]any{"pullLists": map[string]any{"../x": []string{"nginx"}}}, `pullLists "../x"`},
		{"dataDir /", map[string]any{"dataDir": "/"}, `dataDir "/": a system or container runtime directory`},
		{"dataDir /etc/", map[string]any{"dataDir": "/etc/"}, `dataDir "/etc/": a system or container runtime directory`},
		{"dataDir /var/lib/../lib", map[string]any{"dataDir": "/var/lib/../lib"}, `dataDir "/var/lib/../lib": a system or container runtime directory`},
		{"dataDir containerd's", map[string]any{"dataDir": "/var/lib/containerd"}, `dataDir "/var/lib/containerd": a system or container runtime directory`},
		{"dataDir K3s's containerd", map[string]any{"dataDir": "/run/k3s/containerd"}, `a system or container runtime directory`},
		{"dataDir inside containerd's", map[string]any{"dataDir": "/var/lib/containerd/holdfast"}, `dataDir "/var/lib/containerd/holdfast": inside /var/lib/containerd`},
		{"dataDir inside the kubelet's", map[string]any{"dataDir": "/var/lib/kubelet/pods/x"}, `inside /var/lib/kubelet`},
		{"dataDir /usr", map[string]any{"dataDir": "/usr"}, `a system or container runtime directory`},
		{"policy keys twice", map[string]any{"policyKeys": map[string]any{"secret": "a", "configMap": "b"}}, "policyKeys: give a secret or a configMap, not both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := helm(t, "template", release, chartDir(t), "-f", valuesFile(t, tc.values))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template with %v: %v, want an error naming %s", tc.values, err, tc.want)
			}
		})
	}
}

// TestPinSet renders pins and pull lists and reads them back with holdfast's own parsers, from a dir laid out
// as the kubelet lays out a ConfigMap volume; then swaps the data as the kubelet does on an update.
func TestPinSet(t *testing.T) {
	t.Parallel()
	pins := []string{"registry.example.com/platform/*", "docker.io/library/nginx:1.27", "*ingress*"}
	r := render(t, map[string]any{
		"pins":      pins,
		"pullLists": map[string]any{"platform": []string{"registry.example.com/platform/api:1.4", "busybox:1.36"}},
	})
	cm := r.configMap(t, fullname)
	if cm.Namespace != namespace {
		t.Errorf("ConfigMap namespace %q", cm.Namespace)
	}
	keys := slices.Sorted(mapKeys(cm.Data))
	if want := []string{source.Marker, "cluster.pins", "platform.txt"}; !slices.Equal(keys, want) {
		t.Fatalf("ConfigMap keys %q, want %q", keys, want)
	}

	dir := filepath.Join(t.TempDir(), "cluster")
	kubeletWrite(t, dir, "..2026_12_03_10_00_00.000000001", cm.Data)
	scan := source.Scan([]string{dir})
	if len(scan.Errors) != 0 {
		t.Fatalf("scanning the pin set dir: %v", scan.Errors)
	}
	if len(scan.Unmarked) != 0 {
		t.Errorf("the pin set dir lacks the marker: %v", scan.Unmarked)
	}
	kinds := map[string]source.Kind{}
	ids := map[string]string{}
	for _, s := range scan.Sources {
		kinds[filepath.Base(s.Path)] = s.Kind
		ids[filepath.Base(s.Path)] = s.Identity
		if filepath.Dir(s.Path) != dir {
			t.Errorf("source %s is not named under the mounted dir %s", s.Path, dir)
		}
	}
	if want := map[string]source.Kind{"cluster.pins": source.PinList, "platform.txt": source.PullList}; fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Fatalf("sources %v, want %v (skipped: %+v)", kinds, want, scan.Skipped)
	}
	pl, err := source.ReadPinList(filepath.Join(dir, "cluster.pins"))
	if err != nil || len(pl.Errors) != 0 {
		t.Fatalf("reading cluster.pins: %v %v", err, pl.Errors)
	}
	var raw []string
	for _, p := range pl.Patterns {
		raw = append(raw, p.Raw)
	}
	if !slices.Equal(raw, pins) {
		t.Errorf("cluster.pins holds %q, want %q", raw, pins)
	}
	ul, err := source.ReadPullList(filepath.Join(dir, "platform.txt"))
	if err != nil || len(ul.Errors) != 0 {
		t.Fatalf("reading platform.txt: %v %v", err, ul.Errors)
	}
	var refs []string
	for _, e := range ul.Entries {
		refs = append(refs, e.Ref)
	}
	if want := []string{"registry.example.com/platform/api:1.4", "docker.io/library/busybox:1.36"}; !slices.Equal(refs, want) {
		t.Errorf("platform.txt holds %q, want %q", refs, want)
	}

	// An update: new pins, the pull list gone.
	r = render(t, map[string]any{"pins": []string{"nginx"}})
	cm = r.configMap(t, fullname)
	kubeletWrite(t, dir, "..2026_12_03_10_01_00.000000002", cm.Data)
	scan = source.Scan([]string{dir})
	if len(scan.Errors) != 0 || len(scan.Sources) != 1 || filepath.Base(scan.Sources[0].Path) != "cluster.pins" {
		t.Fatalf("after the update: sources %+v, errors %v", scan.Sources, scan.Errors)
	}
	if scan.Sources[0].Identity == ids["cluster.pins"] {
		t.Errorf("cluster.pins kept its identity %q through the update: holdfast would not read it again", ids["cluster.pins"])
	}
	pl, err = source.ReadPinList(filepath.Join(dir, "cluster.pins"))
	if err != nil || len(pl.Patterns) != 1 || pl.Patterns[0].Raw != "nginx" {
		t.Errorf("after the update cluster.pins holds %+v (%v), want nginx", pl.Patterns, err)
	}
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// kubeletWrite lays data out in dir as the kubelet's atomic writer does for a ConfigMap volume: the files in a
// timestamped dir, the ..data symlink swapped to it by a rename, each key a symlink to ..data/<key>, keys no
// longer there removed.
func kubeletWrite(t *testing.T, dir, stamp string, data map[string]string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, stamp), 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range data {
		if err := os.WriteFile(filepath.Join(dir, stamp, k), []byte(v), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(stamp, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for k := range data {
		link := filepath.Join(dir, k)
		if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
			if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := data[e.Name()]; !ok && !strings.HasPrefix(e.Name(), "..") {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// metricNames are the series names holdfast exports, from a real registry: histograms with their
// _bucket, _sum and _count series.
func metricNames(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	metrics.New(reg)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[mf.GetName()+s] = true
			}
		}
	}
	if len(names) < 10 {
		t.Fatalf("holdfast's registry exports only %v", names)
	}
	return names
}

var (
	promString    = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchers  = regexp.MustCompile(`\{[^}]*\}`)
	promRange     = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent     = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promOperators = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true}
)

// exprMetrics returns the metric names a PromQL expression selects: identifiers that are not functions,
// keywords, label names or strings.
func exprMetrics(expr string) []string {
	e := promString.ReplaceAllString(expr, `""`)
	e = promMatchers.ReplaceAllString(e, "{}")
	e = promRange.ReplaceAllString(e, "")
	e = promGrouping.ReplaceAllString(e, "")
	var out []string
	for _, loc := range promIdent.FindAllStringIndex(e, -1) {
		id := e[loc[0]:loc[1]]
		rest := strings.TrimSpace(e[loc[1]:])
		if strings.HasPrefix(rest, "(") || promOperators[id] {
			continue
		}
		if loc[0] > 0 && (e[loc[0]-1] >= '0' && e[loc[0]-1] <= '9' || e[loc[0]-1] == '.') {
			continue // the exponent or unit of a number
		}
		out = append(out, id)
	}
	return out
}

func TestExprMetrics(t *testing.T) {
	got := exprMetrics(`histogram_quantile(0.9, sum by (node, le) (rate(holdfast_import_duration_seconds_bucket{node=~"$node", a="b(c)"}[$__rate_interval]))) / on (x) foo_total > 1e3 and bar`)
	if want := []string{"holdfast_import_duration_seconds_bucket", "foo_total", "bar"}; !slices.Equal(got, want) {
		t.Errorf("exprMetrics: %q, want %q", got, want)
	}
}

func TestMonitoring(t *testing.T) {
	t.Parallel()
	names := metricNames(t)
	r := render(t, map[string]any{
		"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]string{"release": "prom"}},
		"prometheusRule": map[string]any{"enabled": true},
		"dashboard":      map[string]any{"enabled": true},
	})
	ds := r.daemonSet(t)
	checkService(t, r, ds)

	if len(r.ServiceMonitors) != 1 {
		t.Fatalf("%d ServiceMonitors", len(r.ServiceMonitors))
	}
	sm := r.ServiceMonitors[0]
	if sm.Metadata.Labels["release"] != "prom" {
		t.Errorf("ServiceMonitor labels %v lack release=prom", sm.Metadata.Labels)
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if r.Services[0].Labels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s, which the Service lacks", k, v)
		}
	}
	if len(sm.Spec.Selector.MatchLabels) == 0 || len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor spec %+v", sm.Spec)
	}
	if !slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{namespace}) {
		t.Errorf("ServiceMonitor namespaces %v", sm.Spec.NamespaceSelector.MatchNames)
	}

	// Alerts: every holdfast_* name exists in holdfast's registry; the only other series is kube-state-metrics'
	// readiness, for the not-ready alert.
	external := map[string]bool{"kube_pod_container_status_ready": true}
	if len(r.PrometheusRules) != 1 {
		t.Fatalf("%d PrometheusRules", len(r.PrometheusRules))
	}
	alerts := map[string]string{}
	for _, g := range r.PrometheusRules[0].Spec.Groups {
		for _, rule := range g.Rules {
			ms := exprMetrics(rule.Expr)
			if len(ms) == 0 {
				t.Errorf("alert %s selects no metric: %s", rule.Alert, rule.Expr)
			}
			for _, m := range ms {
				if !names[m] && !external[m] {
					t.Errorf("alert %s uses %s, which holdfast does not export: %s", rule.Alert, m, rule.Expr)
				}
			}
			if rule.Labels["severity"] == "" || rule.Annotations["summary"] == "" {
				t.Errorf("alert %s has no severity or summary", rule.Alert)
			}
			alerts[rule.Alert] = rule.For + " " + strings.Join(ms, ",")
		}
	}
	want := map[string]string{
		"HoldfastSourceFailing":          "15m holdfast_sources",
		"HoldfastHealBackoff":            "5m holdfast_heal_backoff_images",
		"HoldfastContainerdDisconnected": "10m holdfast_containerd_connected",
		"HoldfastNotReady":               "10m kube_pod_container_status_ready",
	}
	if fmt.Sprint(alerts) != fmt.Sprint(want) {
		t.Errorf("alerts %v, want %v", alerts, want)
	}

	// The dashboard: JSON, labelled for Grafana's sidecar, every expression on holdfast's metrics.
	cm := r.configMap(t, fullname+"-dashboard")
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v lack grafana_dashboard=1", cm.Labels)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal([]byte(cm.Data["holdfast.json"]), &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			ms := exprMetrics(q.Expr)
			if len(ms) == 0 {
				t.Errorf("panel %q selects no metric: %s", p.Title, q.Expr)
			}
			for _, m := range ms {
				if !names[m] {
					t.Errorf("panel %q uses %s, which holdfast does not export: %s", p.Title, m, q.Expr)
				}
				used[m] = true
			}
		}
	}
	labelValues := regexp.MustCompile(`^label_values\(([A-Za-z_:][A-Za-z0-9_:]*)`)
	for _, v := range dash.Templating.List {
		if m := labelValues.FindStringSubmatch(v.Definition); m != nil && !names[m[1]] {
			t.Errorf("dashboard variable %s reads %s, which holdfast does not export", v.Name, m[1])
		}
	}
	for _, m := range []string{"holdfast_pinned_images", "holdfast_sources", "holdfast_heals_total",
		"holdfast_import_bytes_read_total", "holdfast_import_duration_seconds_bucket"} {
		if !used[m] {
			t.Errorf("no dashboard panel shows %s", m)
		}
	}
}

// TestPackage packages the chart as docs/k3s.md does for a HelmChart's chartContent, and renders the archive:
// what .helmignore leaves out must not be something a template reads.
func TestPackage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := helm(t, "package", chartDir(t), "-d", dir); err != nil {
		t.Fatal(err)
	}
	tgz := filepath.Join(dir, "holdfast-0.1.0.tgz")
	if _, err := os.Stat(tgz); err != nil {
		t.Fatalf("helm package wrote no %s: %v", filepath.Base(tgz), err)
	}
	out, err := helm(t, "template", release, tgz, "--namespace", namespace, "-f", valuesFile(t, map[string]any{"dashboard": map[string]any{"enabled": true}}))
	if err != nil {
		t.Fatal(err)
	}
	r := decode(t, out)
	var dash map[string]any
	if err := json.Unmarshal([]byte(r.configMap(t, fullname+"-dashboard").Data["holdfast.json"]), &dash); err != nil || len(dash) == 0 {
		t.Errorf("the packaged chart's dashboard: %v (%d keys)", err, len(dash))
	}
	checkPaths(t, r.daemonSet(t), presets["k3s"])
}

// TestNotes renders NOTES.txt (helm template does not): with the defaults, and with the pin set emptied by
// --set pins=null, as the README's removal steps do.
func TestNotes(t *testing.T) {
	t.Parallel()
	for _, set := range [][]string{nil, {"--set", "pins=null", "--set", "pullLists=null"}} {
		args := append([]string{"install", "--dry-run=client", release, chartDir(t), "--namespace", namespace}, set...)
		out, err := helm(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "NOTES:") || !strings.Contains(out, presets["k3s"].socket) || !strings.Contains(out, "0 pin pattern(s)") ||
			!strings.Contains(out, `type=="HoldfastImagesReady"`) {
			t.Errorf("helm %s: NOTES lack the socket, the pin count or the required images' condition:\n%s", strings.Join(set, " "), out[strings.Index(out, "NOTES:")+1:])
		}
	}
}

// TestSignaturePolicyValues renders a policy and its keys' Secret: the policy is a ConfigMap of its own mounted
// at /etc/holdfast/policy and given as --policy, the keys are mounted at /etc/holdfast/policy-keys, and the
// rendered file, laid out as the kubelet lays out the two volumes, is a policy holdfast loads, its key found.
// Without a policy there is neither flag nor volume.
func TestSignaturePolicyValues(t *testing.T) {
	t.Parallel()
	r := render(t, map[string]any{
		"policy": map[string]any{
			"mode":  "enforce",
			"rules": []any{map[string]any{"images": []string{"registry.example.com/platform/*"}, "keys": []string{"../policy-keys/platform.pub"}}},
		},
		"policyKeys": map[string]any{"secret": "holdfast-keys"},
	})
	cm := r.configMap(t, fullname+"-policy")
	ds := r.daemonSet(t)
	hf := container(t, ds, "holdfast")
	// As an environment variable, so that a holdfast command run in the pod judges by it too.
	if v, ok := env(hf, "HOLDFAST_POLICY"); !ok || v != "/etc/holdfast/policy/policy.yaml" {
		t.Errorf("HOLDFAST_POLICY %q (set %v), want /etc/holdfast/policy/policy.yaml", v, ok)
	}
	if v, ok := flags(hf.Args)["policy"]; ok {
		t.Errorf("--policy %q: a command run in the pod would not see it", v)
	}
	mounts := map[string]string{}
	for _, m := range hf.VolumeMounts {
		if !m.ReadOnly && (m.Name == "policy" || m.Name == "policy-keys") {
			t.Errorf("volume %s is mounted writable", m.Name)
		}
		mounts[m.Name] = m.MountPath
	}
	if mounts["policy"] != "/etc/holdfast/policy" || mounts["policy-keys"] != "/etc/holdfast/policy-keys" {
		t.Errorf("mounts %v", mounts)
	}
	if v, ok := volume(ds, "policy"); !ok || v.ConfigMap == nil || v.ConfigMap.Name != fullname+"-policy" {
		t.Errorf("policy volume %+v", v)
	}
	if v, ok := volume(ds, "policy-keys"); !ok || v.Secret == nil || v.Secret.SecretName != "holdfast-keys" {
		t.Errorf("policy-keys volume %+v", v)
	}

	root := t.TempDir()
	kubeletWrite(t, filepath.Join(root, "policy"), "..2026_12_04_10_00_00.000000001", cm.Data)
	kubeletWrite(t, filepath.Join(root, "policy-keys"), "..2026_12_04_10_00_00.000000001",
		map[string]string{"platform.pub": string(sigtest.PublicPEM(t, sigtest.NewKey(t)))})
	pol, err := signature.Load(filepath.Join(root, "policy", "policy.yaml"))
	if err != nil {
		t.Fatalf("the rendered policy does not load: %v\n%s", err, cm.Data["policy.yaml"])
	}
	if pol.Mode != signature.Enforce || len(pol.Rules) != 1 || len(pol.Rules[0].Keys) != 1 {
		t.Errorf("loaded %+v", pol)
	}

	r = render(t, nil)
	hf = container(t, r.daemonSet(t), "holdfast")
	if v, ok := env(hf, "HOLDFAST_POLICY"); ok {
		t.Errorf("HOLDFAST_POLICY %q without a policy", v)
	}
	if _, ok := volume(r.daemonSet(t), "policy"); ok {
		t.Errorf("a policy volume without a policy")
	}
}

// TestRequiredImages: requiredImages reaches the reporter's environment, and the RBAC grants read access
// to pods only with it, and to the cluster's workloads and Nodes' lists only with clusterWorkloads too.
// checkNodeImagesCRD: with the required images, the chart installs the NodeImages resource the reporter writes
// and holdfast check --cluster reads (its group, name and kind as internal/report has them); without, none.
func checkNodeImagesCRD(t *testing.T, r rendered, want bool) {
	t.Helper()
	if !want {
		if len(r.CRDs) != 0 {
			t.Errorf("%d CustomResourceDefinitions without the required images", len(r.CRDs))
		}
		return
	}
	c, ok := r.crd("nodeimages." + hfreport.Group)
	if !ok {
		t.Fatalf("no NodeImages CustomResourceDefinition among %d", len(r.CRDs))
	}
	if c.Metadata.Name != "nodeimages."+hfreport.Group || c.Spec.Group != hfreport.Group || c.Spec.Scope != "Cluster" ||
		c.Spec.Names.Kind != hfreport.Kind || "/apis/"+c.Spec.Group+"/"+c.Spec.Versions[0].Name+"/"+c.Spec.Names.Plural != hfreport.NodeImagesPath {
		t.Errorf("CustomResourceDefinition %s: %+v", c.Metadata.Name, c.Spec)
	}
	v := c.Spec.Versions[0]
	if len(c.Spec.Versions) != 1 || !v.Served || !v.Storage || v.Schema.OpenAPIV3Schema.Properties["held"].Format != "byte" ||
		v.Schema.OpenAPIV3Schema.Properties["images"].Type != "integer" {
		t.Errorf("CustomResourceDefinition versions %+v", c.Spec.Versions)
	}
	// The API server prunes what the schema does not name: every field the reporter writes must be in it.
	for _, f := range unschemed(reflect.TypeFor[hfreport.NodeImages](), v.Schema.OpenAPIV3Schema, "") {
		t.Errorf("NodeImages field %s is not in the CustomResourceDefinition's schema: the API server drops it", f)
	}
}

// unschemed lists the JSON fields of type typ (a struct, and the structs, slices and maps in it) that the
// schema s does not name, by their paths. metadata is the API server's.
func unschemed(typ reflect.Type, s schemaProp, path string) []string {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	if typ == reflect.TypeFor[hfreport.Rows]() {
		typ = reflect.TypeFor[[]hfreport.Row]() // what Rows.MarshalJSON writes
	}
	switch typ.Kind() {
	case reflect.Slice:
		if typ.Elem().Kind() == reflect.Uint8 {
			return nil // []byte: a string in JSON
		}
		if s.Items == nil {
			return []string{path + "[]"}
		}
		return unschemed(typ.Elem(), *s.Items, path+"[]")
	case reflect.Map:
		if s.AdditionalProperties == nil {
			return []string{path + "{}"}
		}
		return unschemed(typ.Elem(), *s.AdditionalProperties, path+"{}")
	case reflect.Struct:
		if typ == reflect.TypeFor[time.Time]() || path == ".metadata" {
			return nil
		}
	default:
		return nil
	}
	var out []string
	for f := range typ.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			out = append(out, unschemed(f.Type, s, path)...)
			continue
		}
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		p, ok := s.Properties[name]
		if !ok {
			out = append(out, path+"."+name)
			continue
		}
		out = append(out, unschemed(f.Type, p, path+"."+name)...)
	}
	return out
}

func TestRequiredImages(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		values                    map[string]any
		required, clusterWorkload bool
	}{
		{"default", map[string]any{}, true, true},
		{"own pods only", map[string]any{"requiredImages": map[string]any{"clusterWorkloads": false}}, true, false},
		{"off", map[string]any{"requiredImages": map[string]any{"enabled": false}}, false, false},
		{"no reporter", map[string]any{"reporter": map[string]any{"enabled": false}}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := render(t, tc.values)
			checkRBAC(t, r, reporterRules(tc.required, tc.clusterWorkload, true))
			checkNodeImagesCRD(t, r, tc.required)
			ds := r.daemonSet(t)
			if _, ok := tc.values["reporter"]; ok {
				if len(ds.Spec.Template.Spec.Containers) != 1 {
					t.Fatalf("%d containers with the reporter off", len(ds.Spec.Template.Spec.Containers))
				}
				return
			}
			env := map[string]string{}
			for _, e := range container(t, ds, "reporter").Env {
				env[e.Name] = e.Value
			}
			if env["HOLDFAST_REQUIRED"] != fmt.Sprint(tc.required) {
				t.Errorf("reporter HOLDFAST_REQUIRED=%q, want %v", env["HOLDFAST_REQUIRED"], tc.required)
			}
			if want := fmt.Sprint(tc.clusterWorkload || !tc.required); env["HOLDFAST_CLUSTER_WORKLOADS"] != want {
				t.Errorf("reporter HOLDFAST_CLUSTER_WORKLOADS=%q, want %s", env["HOLDFAST_CLUSTER_WORKLOADS"], want)
			}
		})
	}
}
