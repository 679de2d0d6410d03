package kubelet

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestKubeadm: kubeadm's one file, with AlwaysVerify: every image the
// kubelet did not pull itself is verified, so one held with IfNotPresent or
// Never is pulled (or refused); Always pulls anyway, and the sandbox image
// (no pull policy: the CRI pulls it) is not the kubelet's.
func TestKubeadm(t *testing.T) {
	c, err := Load([]string{"testdata/kubeadm.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Policy != AlwaysVerify || c.PolicyFrom != "testdata/kubeadm.yaml" || !c.Verifies || !slices.Equal(c.Files, []string{"testdata/kubeadm.yaml"}) {
		t.Errorf("config %+v", c)
	}
	for _, tc := range []struct {
		image, policy string
		want          bool
	}{
		{"nginx:1.27", "IfNotPresent", true},
		{"registry.example.com/shop/api@sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "Never", true},
		{"nginx:1.27", "Always", false},
		{"registry.k8s.io/pause:3.10", "", false},
	} {
		if got := c.ForcesPull(tc.image, tc.policy); got != tc.want {
			t.Errorf("%s %s: forced %v, want %v", tc.image, tc.policy, got, tc.want)
		}
	}
}

// TestK3sDropIns: K3s's drop-in directory, merged as the kubelet merges it
// (its *.conf files in lexical order, subdirectories included, other files
// left): the last word is NeverVerifyAllowlistedImages with an allowlist,
// matched against the image as the pod names it.
func TestK3sDropIns(t *testing.T) {
	dir := "testdata/k3s/kubelet.conf.d"
	c, err := Load([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	wantFiles := []string{dir + "/00-k3s-defaults.conf", dir + "/20-cli-config-dir/10-gc.conf", dir + "/50-verify.conf"}
	if !slices.Equal(c.Files, wantFiles) || c.Policy != NeverVerifyAllowlistedImages || c.PolicyFrom != dir+"/50-verify.conf" ||
		!slices.Equal(c.Allowlist, []string{"registry.example.com/platform/*", "nginx"}) {
		t.Fatalf("config %+v", c)
	}
	for image, want := range map[string]bool{
		"registry.example.com/platform/ingress:1.2": false,
		"registry.example.com/platform/team/agent@sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08": false,
		"nginx:1.27":                         false,
		"nginx":                              false,
		"docker.io/library/nginx:1.27":       true, // the kubelet matches the name as written
		"registry.example.com/platformx/a:1": true,
		"registry.example.com/shop/api:2.0":  true,
	} {
		if got := c.ForcesPull(image, "IfNotPresent"); got != want {
			t.Errorf("%s: forced %v, want %v", image, got, want)
		}
	}
	if got := AllowlistName("docker.io/library/nginx:1.27@sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"); got != "docker.io/library/nginx" {
		t.Errorf("AllowlistName: %q", got)
	}

	// A later file given after the directory (as --config is read before
	// --config-dir, the order of paths is the order of merging).
	never := write(t, "never.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimagePullCredentialsVerificationPolicy: null\npreloadedImagesVerificationAllowlist: null\n")
	c, err = Load([]string{dir, never})
	if err != nil {
		t.Fatal(err)
	}
	if c.Policy != NeverVerifyPreloadedImages || c.ForcesPull("registry.example.com/shop/api:2.0", "Never") {
		t.Errorf("with the policy removed: %+v", c)
	}
}

func write(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

// TestDefaults: no policy is NeverVerifyPreloadedImages, which verifies no
// image the kubelet did not pull; the feature gate off verifies nothing.
func TestDefaults(t *testing.T) {
	for name, text := range map[string]string{
		"no policy": header + "cgroupDriver: systemd\n",
		"gate off":  header + "featureGates:\n  KubeletEnsureSecretPulledImages: false\n",
		"never":     header + "imagePullCredentialsVerificationPolicy: NeverVerify\n",
	} {
		c, err := Load([]string{write(t, "config.yaml", text)})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.ForcesPull("registry.example.com/shop/api:2.0", "IfNotPresent") {
			t.Errorf("%s: %+v forces a pull", name, c)
		}
	}
	if c, _ := Load(nil); c.Policy != NeverVerifyPreloadedImages || !c.Verifies {
		t.Errorf("no file: %+v", c)
	}
}

// TestBadConfig: what does not parse, is not a KubeletConfiguration, or
// what the kubelet refuses to start with, is an error naming the file.
func TestBadConfig(t *testing.T) {
	for name, tc := range map[string]struct{ text, want string }{
		"not yaml":       {"apiVersion: [\n", "yaml: line 1"},
		"not a config":   {"apiVersion: v1\nkind: ConfigMap\n", `not a KubeletConfiguration (apiVersion "v1", kind "ConfigMap")`},
		"policy":         {header + "imagePullCredentialsVerificationPolicy: Sometimes\n", "imagePullCredentialsVerificationPolicy: Sometimes is none of"},
		"gate off":       {header + "featureGates: {KubeletEnsureSecretPulledImages: false}\nimagePullCredentialsVerificationPolicy: AlwaysVerify\n", "feature gate KubeletEnsureSecretPulledImages off"},
		"list, policy":   {header + "imagePullCredentialsVerificationPolicy: AlwaysVerify\npreloadedImagesVerificationAllowlist: [nginx]\n", "not NeverVerifyAllowlistedImages"},
		"tag":            {header + "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\"nginx:1.27\"]\n", `"nginx:1.27": an image name without tag or digest`},
		"inner wildcard": {header + "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\"registry.example.com/*/app\"]\n", "a wildcard may only end the pattern"},
		"bare wildcard":  {header + "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\"/*\"]\n", "a registry and path followed by /*"},
		"spaces":         {header + "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\" nginx\"]\n", "spaces around it"},
	} {
		f := write(t, "config.yaml", tc.text)
		_, err := Load([]string{f})
		if err == nil || !strings.HasPrefix(err.Error(), "kubelet configuration "+f+": ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %s and saying %q", name, err, f, tc.want)
		}
	}
	if _, err := Load([]string{"testdata/none.yaml"}); err == nil || !strings.Contains(err.Error(), "testdata/none.yaml") {
		t.Errorf("a file that is not there: %v", err)
	}
}

// TestFind: K3s's drop-in directory before RKE2's, before kubeadm's file;
// none when none is there.
func TestFind(t *testing.T) {
	root := t.TempDir()
	if got := Find(root); got != nil {
		t.Errorf("empty root: %v", got)
	}
	kubeadm := filepath.Join(root, "var/lib/kubelet/config.yaml")
	if err := os.MkdirAll(filepath.Dir(kubeadm), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kubeadm, []byte(header), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := Find(root); !slices.Equal(got, []string{kubeadm}) {
		t.Errorf("kubeadm: %v", got)
	}
	k3s := filepath.Join(root, "var/lib/rancher/k3s/agent/etc/kubelet.conf.d")
	if err := os.MkdirAll(k3s, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := Find(root); !slices.Equal(got, []string{k3s}) {
		t.Errorf("k3s: %v", got)
	}
}
