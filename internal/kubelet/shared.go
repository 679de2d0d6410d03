package kubelet

import (
	"fmt"
	"slices"
	"strings"

	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/units"
	"github.com/holdfast-project/holdfast/internal/workload"
)

// SharedDigest is an image a workload asks for under a name holdfast does
// not hold, whose digest the node holds under other names: once the kubelet
// pulls it, it verifies the pull credentials of those names too.
//
// The kubelet (k8s.io/kubernetes pkg/kubelet/images, with
// KubeletEnsureSecretPulledImages) keeps a record of each image it pulls,
// keyed by the image's ID (ImagePulledRecord, written by
// PullManager.RecordImagePulled after pullImage), and in it the names it
// pulled the image as (without tag or digest, as the pod writes them) with
// the credentials that pulled each. PullManager.MustAttemptImagePull takes
// the record's existence as "pulled by the kubelet", whatever the name asked
// for; NeverVerifyPreloadedImages then verifies the credentials, and a name
// the record does not hold must be pulled again: with imagePullPolicy Never
// the pod gets ErrImageNeverPull (kubernetes#138175).
type SharedDigest struct {
	// Image is the image as the workload asks for it, normalised; Digest is
	// the digest it resolves to on this node.
	Image  string `json:"image"`
	Digest string `json:"digest"`
	// UsedBy are the uses the kubelet would pull it for; PullSecrets the
	// imagePullSecrets of their pods.
	UsedBy      []string `json:"usedBy"`
	PullSecrets []string `json:"pullSecrets,omitempty"`
	// Held are the names holdfast holds that digest under, sorted;
	// Allowlist the entries of preloadedImagesVerificationAllowlist that
	// would exempt them.
	Held      []string `json:"held"`
	Allowlist []string `json:"allowlist"`
	// Policy is the kubelet's imagePullCredentialsVerificationPolicy, From
	// the file that set it; Assumed says no configuration was read and the
	// kubelet's defaults are taken.
	Policy  string `json:"policy"`
	From    string `json:"from,omitempty"`
	Assumed bool   `json:"assumed,omitempty"`
	Message string `json:"message"`
}

// VerifiesOncePulled says whether the kubelet, once it has pulled an image
// under one name, verifies the pull credentials of the other names it finds
// the image under: with the feature gate on and NeverVerifyPreloadedImages
// only. NeverVerify (or the gate off) never verifies; AlwaysVerify verifies
// every image the kubelet did not pull under that name anyway, and
// NeverVerifyAllowlistedImages every image not allowlisted, whatever it
// pulled (ForcedPull warns of those), while an allowlisted one stays exempt.
// A nil c, no configuration read, is the kubelet's defaults since 1.35: the
// gate on, NeverVerifyPreloadedImages.
func (c *Config) VerifiesOncePulled() bool {
	return c == nil || (c.Verifies && c.Policy == NeverVerifyPreloadedImages)
}

// SharedDigests are the images of images that the kubelet would pull under a
// name holdfast does not hold although holdfast holds their digest under
// other names, when c has it then verify those names (VerifiesOncePulled).
//
// The digest of the name a workload asks for is known on this node in two
// ways only: a digest reference names it, or containerd has a record of
// that name (not holdfast's: the kubelet, or someone else, put it there). A
// tag the node has no record of resolves to nothing here, and is not
// matched. Digests are compared as the records' targets: two records of one
// image ID with different targets (an index and one of its manifests) are
// not matched.
//
// The kubelet pulls a name it has no record of with imagePullPolicy
// IfNotPresent or Always, and one it has with Always only; Never never
// pulls, and the sandbox image is the CRI's. It files a pull under the
// name's repository: a held name of the same repository is warned of only
// when the pods that pull carry imagePullSecrets (a pull without them is
// open to every pod; one with them is not to a pod without).
func (c *Config) SharedDigests(images []workload.Image, records []runtime.Image) []SharedDigest {
	if !c.VerifiesOncePulled() {
		return nil
	}
	byName := map[string]runtime.Image{}
	held := map[string][]string{} // digest → holdfast's names of it
	for _, r := range records {
		if runtime.IsCRIRecord(r.Name) {
			continue
		}
		byName[r.Name] = r
		if r.Owned() {
			d := r.Target.Digest.String()
			held[d] = append(held[d], r.Name)
		}
	}
	asWritten := map[string][]string{} // a held name → as the manifests write it
	for _, img := range images {
		for _, u := range img.Uses {
			asWritten[img.Ref] = append(asWritten[img.Ref], u.Image)
		}
	}
	var out []SharedDigest
	for _, img := range images {
		name, _, dg := workload.CRIName(img.Ref)
		r, recorded := byName[name]
		if recorded {
			if r.Owned() {
				continue
			}
			dg = r.Target.Digest.String()
		}
		names := slices.DeleteFunc(slices.Clone(held[dg]), func(n string) bool { return n == name })
		if dg == "" || len(names) == 0 {
			continue
		}
		s := SharedDigest{Image: img.Ref, Digest: dg}
		for _, u := range img.Uses {
			if u.PullPolicy != "Always" && (recorded || u.PullPolicy != "IfNotPresent") {
				continue
			}
			s.UsedBy = append(s.UsedBy, u.String())
			for _, p := range u.PullSecrets {
				if !slices.Contains(s.PullSecrets, p) {
					s.PullSecrets = append(s.PullSecrets, p)
				}
			}
		}
		if s.UsedBy == nil {
			continue
		}
		if len(s.PullSecrets) == 0 {
			// The kubelet files a pull under the name's repository, and one
			// without credentials as open to every pod of the node
			// (NodePodsAccessible): a held name of that repository is found
			// there and never verified.
			names = slices.DeleteFunc(names, func(n string) bool { return oci.Repository(n) == oci.Repository(name) })
			if len(names) == 0 {
				continue
			}
		}
		s.Held = slices.Sorted(slices.Values(names))
		for _, n := range s.Held {
			for _, w := range append([]string{n}, asWritten[n]...) {
				if a := AllowlistName(w); !slices.Contains(s.Allowlist, a) {
					s.Allowlist = append(s.Allowlist, a)
				}
			}
		}
		c.explain(&s)
		out = append(out, s)
	}
	return out
}

// explain fills in s's policy and message.
func (c *Config) explain(s *SharedDigest) {
	s.Policy = NeverVerifyPreloadedImages
	policy := "imagePullCredentialsVerificationPolicy " + s.Policy
	switch {
	case c == nil:
		s.Assumed = true
		policy += " (no kubelet configuration read: the kubelet's default since Kubernetes 1.35, assumed; --kubelet-config)"
	case c.PolicyFrom != "":
		s.From = c.PolicyFrom
		policy += " in " + s.From
	default:
		policy += " (the kubelet's default)"
	}
	with := ""
	if len(s.PullSecrets) > 0 {
		with = ", with imagePullSecrets " + strings.Join(s.PullSecrets, ", ")
	}
	short := strings.TrimPrefix(s.Digest, "sha256:")
	if len(short) > 12 {
		short = short[:12]
	}
	s.Message = fmt.Sprintf("%s (used by %s%s): this node holds its digest %s only as %s, not under this name; "+
		"once the kubelet pulls %s it records that image as pulled by itself, and %s then has it verify the pull credentials of those names: "+
		"a pod that asks for one of them without credentials the record holds for that name is refused (imagePullPolicy Never: ErrImageNeverPull) "+
		"or pulls it again (IfNotPresent), which fails where no registry answers (kubelet PullManager.MustAttemptImagePull, kubernetes#138175); "+
		"name the image %s in the archive or pin list so that the node holds it as the workload asks for it, "+
		"or add %s to preloadedImagesVerificationAllowlist with %s",
		s.Image, units.List(s.UsedBy, 1), with, short, strings.Join(s.Held, ", "),
		s.Image, policy,
		s.Image, strings.Join(s.Allowlist, ", "), NeverVerifyAllowlistedImages)
}
