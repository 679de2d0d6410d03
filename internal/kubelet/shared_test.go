package kubelet

import (
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/workload"
)

var (
	webDigest   = digest.FromString("web")
	otherDigest = digest.FromString("other")
)

// sharedManifests ask for the digest holdfast holds as
// registry.example.com/shop/web:1 under other names, and for the control
// cases: that name itself, another digest, a tag the node has no record of,
// pullPolicy Never.
var sharedManifests = `apiVersion: apps/v1
kind: Deployment
metadata: {name: mirror, namespace: shop}
spec:
  template:
    spec:
      imagePullSecrets: [{name: regcred}, {name: regcred}, {name: backup}]
      containers:
        - {name: web, image: "mirror.example.com/shop/web@` + webDigest.String() + `"}
        - {name: held, image: "registry.example.com/shop/web:1"}
        - {name: other, image: "mirror.example.com/shop/web@` + otherDigest.String() + `"}
        - {name: tag, image: "mirror.example.com/shop/web:1"}
        - {name: never, image: "mirror.example.com/shop/never@` + webDigest.String() + `", imagePullPolicy: Never}
        - {name: tagged, image: "mirror.example.com/shop/tagged:1"}
        - {name: always, image: "mirror.example.com/shop/always:1", imagePullPolicy: Always}
        - {name: same, image: "registry.example.com/shop/web:1.1", imagePullPolicy: Always}
---
apiVersion: v1
kind: Pod
metadata: {name: plain, namespace: shop}
spec:
  containers:
    - {name: c, image: "public.example.com/web@` + webDigest.String() + `"}
    - {name: same, image: "registry.example.com/shop/web:1.2", imagePullPolicy: Always}
`

// sharedRecords: holdfast's web:1 and its digest record; two records of the
// same target that holdfast does not hold (a kubelet pull, a ctr tag); an
// image holdfast holds at another digest.
func sharedRecords() []runtime.Image {
	owned := map[string]string{runtime.LabelPinned: runtime.PinnedValue, runtime.LabelCRIPinned: runtime.PinnedValue}
	rec := func(name string, d digest.Digest, labels map[string]string) runtime.Image {
		return runtime.Image{Name: name, Target: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: d}, Labels: labels}
	}
	return []runtime.Image{
		rec("registry.example.com/shop/web:1", webDigest, owned),
		rec("registry.example.com/shop/web@"+webDigest.String(), webDigest, owned),
		rec("mirror.example.com/shop/tagged:1", webDigest, nil),
		rec("mirror.example.com/shop/always:1", webDigest, nil),
		rec("registry.example.com/shop/web:1.1", webDigest, nil),
		rec("registry.example.com/shop/web:1.2", webDigest, nil),
		rec("registry.example.com/shop/api:2", digest.FromString("api"), owned),
		rec("sha256:"+webDigest.Encoded(), webDigest, nil),
	}
}

func sharedDigests(t *testing.T, c *Config) map[string]SharedDigest {
	t.Helper()
	var set workload.Set
	set.Read("shop.yaml", []byte(sharedManifests))
	if len(set.Errors) > 0 {
		t.Fatal(set.Errors)
	}
	out := map[string]SharedDigest{}
	for _, s := range c.SharedDigests(set.Images(), sharedRecords()) {
		if _, dup := out[s.Image]; dup {
			t.Errorf("%s twice", s.Image)
		}
		out[s.Image] = s
	}
	return out
}

// TestSharedDigests: with NeverVerifyPreloadedImages, a name holdfast does
// not hold that resolves to a digest holdfast holds under another name is
// warned of when the kubelet would pull it: a digest reference the node has
// no record of (with the pod's imagePullSecrets, or without: the kubelet
// records every pull), a record not holdfast's with Always. The held name
// itself, another digest, a tag with no record, Never, and a record not
// holdfast's with IfNotPresent (the kubelet does not pull it) are not.
func TestSharedDigests(t *testing.T) {
	def, err := Load([]string{writeConfig(t, "config.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")})
	if err != nil {
		t.Fatal(err)
	}
	got := sharedDigests(t, def)
	webRef := "mirror.example.com/shop/web@" + webDigest.String()
	// registry.example.com/shop/web:1.1, of the held names' repository, is
	// warned of because its pods carry imagePullSecrets; :1.2, pulled by a
	// pod without, is not: the kubelet files both under the repository, and
	// the second as open to every pod.
	wantRefs := []string{webRef, "mirror.example.com/shop/always:1", "public.example.com/web@" + webDigest.String(), "registry.example.com/shop/web:1.1"}
	if len(got) != len(wantRefs) {
		t.Errorf("warned of %d images, want %d: %v", len(got), len(wantRefs), keys(got))
	}
	for _, r := range wantRefs {
		if _, ok := got[r]; !ok {
			t.Errorf("no warning of %s: %v", r, keys(got))
		}
	}
	web := got[webRef]
	if web.Digest != webDigest.String() || strings.Join(web.PullSecrets, ",") != "regcred,backup" || web.Policy != NeverVerifyPreloadedImages || web.Assumed ||
		strings.Join(web.Held, ",") != "registry.example.com/shop/web:1,registry.example.com/shop/web@"+webDigest.String() ||
		strings.Join(web.Allowlist, ",") != "registry.example.com/shop/web" || strings.Join(web.UsedBy, ",") != "shop.yaml#1 Deployment shop/mirror containers/web" {
		t.Errorf("web: %+v", web)
	}
	want := webRef + " (used by shop.yaml#1 Deployment shop/mirror containers/web, with imagePullSecrets regcred, backup): this node holds its digest " +
		webDigest.Encoded()[:12] + " only as registry.example.com/shop/web:1, registry.example.com/shop/web@" + webDigest.String() + ", not under this name; " +
		"once the kubelet pulls " + webRef + " it records that image as pulled by itself, and imagePullCredentialsVerificationPolicy NeverVerifyPreloadedImages (the kubelet's default) " +
		"then has it verify the pull credentials of those names: a pod that asks for one of them without credentials the record holds for that name " +
		"is refused (imagePullPolicy Never: ErrImageNeverPull) or pulls it again (IfNotPresent), which fails where no registry answers (kubelet PullManager.MustAttemptImagePull, kubernetes#138175); " +
		"name the image " + webRef + " in the archive or pin list so that the node holds it as the workload asks for it, " +
		"or add registry.example.com/shop/web to preloadedImagesVerificationAllowlist with NeverVerifyAllowlistedImages"
	if web.Message != want {
		t.Errorf("message:\n%s\nwant:\n%s", web.Message, want)
	}
	if p := got["public.example.com/web@"+webDigest.String()]; p.PullSecrets != nil || strings.Contains(p.Message, "imagePullSecrets") {
		t.Errorf("a pod without imagePullSecrets: %+v", p)
	}

	// The policies: only NeverVerifyPreloadedImages, set or assumed, warns.
	for name, text := range map[string]string{
		"NeverVerify":                  "imagePullCredentialsVerificationPolicy: NeverVerify\n",
		"the gate off":                 "featureGates: {KubeletEnsureSecretPulledImages: false}\n",
		"AlwaysVerify":                 "imagePullCredentialsVerificationPolicy: AlwaysVerify\n",
		"NeverVerifyAllowlistedImages": "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [registry.example.com/shop/web]\n",
	} {
		c, err := Load([]string{writeConfig(t, "config.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+text)})
		if err != nil {
			t.Fatal(name, err)
		}
		if got := sharedDigests(t, c); len(got) != 0 {
			t.Errorf("%s: warned of %v", name, keys(got))
		}
	}
	set := writeConfig(t, "config.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimagePullCredentialsVerificationPolicy: NeverVerifyPreloadedImages\n")
	c, err := Load([]string{set})
	if err != nil {
		t.Fatal(err)
	}
	if s := sharedDigests(t, c)[webRef]; s.From != set || !strings.Contains(s.Message, "NeverVerifyPreloadedImages in "+set+" then") {
		t.Errorf("set in a file: %+v", s)
	}
	var none *Config
	if s := sharedDigests(t, none)[webRef]; !s.Assumed || !strings.Contains(s.Message, "no kubelet configuration read: the kubelet's default since Kubernetes 1.35, assumed") {
		t.Errorf("no configuration: %+v", s)
	}
}

func keys(m map[string]SharedDigest) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
