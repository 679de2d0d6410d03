package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// The release the test makes: a version of its own, so that its image is none other test's.
const (
	releaseVersion = "v0.0.0-cluster-release"
	releaseRepo    = "holdfast.test/holdfast-release"
	releaseKeySec  = "holdfast-release-key"
	releaseKeyFile = "holdfast-release.pub"
)

// TestReleaseOnNode: `make release` with a key the test generates, into a directory of the test; the image
// archive bootstrapped onto the node under a policy naming the release key, and the release's chart installed
// as it is (image.digest set by the release) with an enforcing policy whose rule for holdfast's own image names
// the release key, from a Secret. The DaemonSet runs holdfast and its reporter as repository@digest, and
// holdfast status in the pod shows its own image pinned, owned and verified by the release key.
func TestReleaseOnNode(t *testing.T) {
	c := needCluster(t)
	s := &scenario{c: c, helm: findHelm(t, c.repoBin), dataDir: filepath.Join(c.dir, "holdfast-release-data")}
	helmHome := filepath.Join(c.dir, "helm")
	s.helmEnv = append(c.env(), "KUBECONFIG="+c.admin,
		"HELM_CACHE_HOME="+helmHome+"/cache", "HELM_CONFIG_HOME="+helmHome+"/config", "HELM_DATA_HOME="+helmHome+"/data")
	dist, pub := makeRelease(t, c, s.helm)
	tarPath, chart := releaseFile(t, dist, "holdfast-image-", ".tar"), releaseFile(t, dist, "holdfast-", ".tgz")
	name, digest := imageOfArchive(t, tarPath)
	repo, _, ok := cutLast(name, ":")
	if !ok || repo != releaseRepo {
		t.Fatalf("the release's image is named %q, want %s:…", name, releaseRepo)
	}
	s.ownImage = name

	// Bootstrap, under the policy the operator writes beside the key.
	pol := filepath.Join(c.dir, "release-policy.yaml")
	if err := os.WriteFile(pol, fmt.Appendf(nil, "mode: enforce\nrules:\n  - images: [%q]\n    keys: [%q]\n", repo, pub), 0o644); err != nil {
		t.Fatal(err)
	}
	// An images dir and a data dir of the release's own, and a repository of its own (releaseRepo): the suite's
	// unsigned image of the commit, which the node's other agents keep and heal, is under holdfast's repository,
	// which an enforcing rule for it would refuse.
	images := filepath.Join(c.dir, "release-images")
	if err := os.MkdirAll(images, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := copyFile(tarPath, filepath.Join(images, "holdfast-release.tar")); err != nil {
		t.Fatal(err)
	}
	if out, err := run(filepath.Join(c.repoBin, "holdfast"), "sync", "--images", images, "--policy", pol,
		"--address", c.sock, "--data-dir", filepath.Join(c.dir, "holdfast-release-cli")); err != nil {
		t.Fatalf("holdfast sync under the release policy: %v\n%s", err, out)
	}

	ctx := context.Background()
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: chartNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	key, err := os.ReadFile(pub)
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: releaseKeySec, Namespace: chartNS}, Data: map[string][]byte{releaseKeyFile: key}}
	if _, err := c.client.CoreV1().Secrets(chartNS).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if s.installed {
			if out, err := s.runHelm("uninstall", release, "--namespace", chartNS, "--wait"); err != nil {
				t.Errorf("helm uninstall: %v\n%s", err, out)
			}
		}
		// The agent's claim on the namespace's policy outlives it (a restart must not open a window): the
		// operator's way to end it for good, as docs/signatures.md says, so that the tests after this one
		// run without the release's policy.
		if err := withdrawPolicy(c); err != nil {
			t.Errorf("withdrawing the release's policy from namespace %s: %v", criNamespace, err)
		}
		if err := c.client.CoreV1().Secrets(chartNS).Delete(ctx, releaseKeySec, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting the Secret %s: %v", releaseKeySec, err)
		}
	})

	inPod := "/etc/holdfast/policy-keys/" + releaseKeyFile
	values := s.values(t, nil, map[string]any{
		// No image: the release's chart names its own (repository, tag and digest).
		"image":      map[string]any{},
		"imagesDir":  images,
		"policy":     map[string]any{"mode": "enforce", "rules": []any{map[string]any{"images": []string{repo}, "keys": []string{inPod}}}},
		"policyKeys": map[string]any{"secret": releaseKeySec},
	})
	if out, err := s.runHelm("install", release, chart, "--namespace", chartNS, "--values", values); err != nil {
		t.Fatalf("helm install %s: %v\n%s", chart, err, out)
	}
	s.installed = true
	pod := s.waitAgentReady(t, "")
	for _, ctr := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if ctr.Image != repo+"@"+digest {
			t.Errorf("container %s runs %q, want the release's %s@%s", ctr.Name, ctr.Image, repo, digest)
		}
	}
	if err := waitFor(name+" verified by the release key and pinned in the agent's status", 2*time.Minute, func() (bool, error) {
		return ownImageVerified(c, pod.Name, s.dataDir, name, inPod)
	}); err != nil {
		t.Errorf("%v\n%s", err, s.agentLogs())
	}
	if pinned, err := c.criPinned(name); err != nil || !pinned {
		t.Errorf("the CRI does not report %s pinned: %v", name, err)
	}
}

// makeRelease runs `make release` with a key it generates, into a directory of the cluster's, building into a
// bin of its own (the repo's bin/ and its image stay as they are), for the host's architecture; helm, cosign v3
// and cyclonedx-gomod are the repo's. It returns the
// release directory and the key's public half.
func makeRelease(t *testing.T, c *cluster, helm string) (dist, pub string) {
	t.Helper()
	cosign := filepath.Join(c.repoBin, "cosign3")
	if !executable(cosign) {
		testenv.Missing(t, "cosign", cosign+" is missing (make deps-cosign builds it)")
	}
	gen := filepath.Join(c.repoBin, "cyclonedx-gomod")
	if !executable(gen) {
		testenv.Missing(t, "sbom", gen+" is missing (make deps-sbom builds it): make release writes the SBOMs with it")
	}
	dir := filepath.Join(c.dir, "release")
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "COSIGN_PASSWORD=", "PATH="+filepath.Dir(gen)+":"+os.Getenv("PATH"))
	keygen := exec.Command(cosign, "generate-key-pair", "--output-key-prefix", "release")
	keygen.Dir, keygen.Env = dir, append(env, "COSIGN_YES=true")
	if out, err := keygen.CombinedOutput(); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
	}
	dist = filepath.Join(dir, "dist")
	start := time.Now()
	mk := exec.Command("make", "--no-print-directory", "release", "DIST="+dist, "BIN="+bin, "HELM="+helm, "COSIGN3="+cosign,
		"VERSION="+releaseVersion, "IMAGE_REPO="+releaseRepo, "RELEASE_KEY="+filepath.Join(dir, "release.key"), "IMAGE_ARCHES="+goruntime.GOARCH)
	mk.Dir, mk.Env = repoRoot(), env
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	t.Logf("make release: %.0fs", time.Since(start).Seconds())
	return dist, filepath.Join(dir, "release.pub")
}

// releaseFile is the one file of dist named prefix…suffix, no -unsigned one, nor a bundle.
func releaseFile(t *testing.T, dist, prefix, suffix string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dist, prefix+"*"+suffix))
	if err != nil || len(m) != 1 || strings.Contains(m[0], "-unsigned") {
		t.Fatalf("want one signed %s*%s in %s, got %v (%v)", prefix, suffix, dist, m, err)
	}
	return m[0]
}

// imageOfArchive reads the name and digest of the image an OCI layout tar's index.json names.
func imageOfArchive(t *testing.T, tarPath string) (name, digest string) {
	t.Helper()
	out, err := exec.Command("tar", "-xOf", tarPath, "index.json").Output()
	if err != nil {
		t.Fatalf("reading index.json of %s: %v", tarPath, err)
	}
	var idx struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(out, &idx); err != nil {
		t.Fatalf("index.json of %s: %v", tarPath, err)
	}
	for _, m := range idx.Manifests {
		if n := m.Annotations[oci.AnnotationImageName]; n != "" {
			if name != "" {
				t.Fatalf("%s names two images: %s and %s", tarPath, name, n)
			}
			name, digest = n, m.Digest
		}
	}
	if name == "" {
		t.Fatalf("%s names no image", tarPath)
	}
	return name, digest
}

// ownImageVerified runs holdfast status -o json in the agent's pod and says whether name is pinned and owned,
// its verdict verified by the key at key.
func ownImageVerified(c *cluster, pod, dataDir, name, key string) (bool, error) {
	cmd := exec.Command(filepath.Join(c.k8sBin, "kubectl"), "--kubeconfig", c.admin, "-n", chartNS, "exec", pod, "-c", "holdfast", "--",
		"/holdfast", "--data-dir", dataDir, "status", "-o", "json")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return false, fmt.Errorf("holdfast status in %s: %v: %s", pod, err, stderr.String())
	}
	var st struct {
		Images []struct {
			Name      string `json:"name"`
			Pinned    bool   `json:"pinned"`
			Owned     bool   `json:"owned"`
			Signature *struct {
				State, By, Reason string
			} `json:"signature"`
		} `json:"images"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return false, fmt.Errorf("holdfast status -o json: %v\n%s", err, out)
	}
	for _, img := range st.Images {
		if img.Name != name {
			continue
		}
		if img.Signature == nil {
			return false, fmt.Errorf("%s: pinned %v, owned %v, no verdict", name, img.Pinned, img.Owned)
		}
		if !img.Pinned || !img.Owned || img.Signature.State != "verified" || img.Signature.By != key {
			return false, fmt.Errorf("%s: pinned %v, owned %v, %s by %q: %s", name, img.Pinned, img.Owned, img.Signature.State, img.Signature.By, img.Signature.Reason)
		}
		return true, nil
	}
	return false, errors.New(name + " is not in the agent's status")
}

// withdrawPolicy takes away the signature policy an agent put in force in the CRI's namespace: the claim lease
// io.holdfast.policy and the namespace's labels that copy it.
func withdrawPolicy(c *cluster) error {
	cli, err := containerd.New(c.sock, containerd.WithDefaultNamespace(criNamespace))
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx := namespaces.WithNamespace(context.Background(), criNamespace)
	if err := cli.NamespaceService().SetLabel(ctx, criNamespace, "io.holdfast.policy", ""); err != nil {
		return err
	}
	if err := cli.NamespaceService().SetLabel(ctx, criNamespace, "io.holdfast.policy-by", ""); err != nil {
		return err
	}
	if err := cli.LeasesService().Delete(ctx, leases.Lease{ID: "io.holdfast.policy"}); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	return nil
}
