package kubelet

import (
	"fmt"
	"slices"
	"strings"

	"github.com/holdfast-project/holdfast/internal/report"
	"github.com/holdfast-project/holdfast/internal/units"
	"github.com/holdfast-project/holdfast/internal/workload"
)

// ForcedPull says why c would have the kubelet pull img, which the node
// holds, for the uses whose pull policy lets it (IfNotPresent, Never); nil
// when it would not, or c is nil.
func (c *Config) ForcedPull(img workload.Image) *report.ForcedPull {
	if c == nil {
		return nil
	}
	var f report.ForcedPull
	for _, u := range img.Uses {
		if !c.ForcesPull(u.Image, u.PullPolicy) {
			continue
		}
		f.UsedBy = append(f.UsedBy, u.String())
		if !slices.Contains(f.PullPolicies, u.PullPolicy) {
			f.PullPolicies = append(f.PullPolicies, u.PullPolicy)
		}
		if name := AllowlistName(u.Image); !slices.Contains(f.Allowlist, name) {
			f.Allowlist = append(f.Allowlist, name)
		}
	}
	if f.UsedBy == nil {
		return nil
	}
	slices.Sort(f.PullPolicies)
	f.Policy, f.From = c.Policy, c.PolicyFrom
	var what string
	switch {
	case !slices.Contains(f.PullPolicies, "Never"):
		what = "the kubelet would pull it although this node holds it (imagePullPolicy IfNotPresent), which fails where no registry answers"
	case !slices.Contains(f.PullPolicies, "IfNotPresent"):
		what = "the kubelet would refuse to start it although this node holds it (imagePullPolicy Never: ErrImageNeverPull)"
	default:
		what = "the kubelet would pull it although this node holds it (imagePullPolicy IfNotPresent), which fails where no registry answers, or refuse to start it (Never: ErrImageNeverPull)"
	}
	why := fmt.Sprintf("imagePullCredentialsVerificationPolicy %s in %s has it verify the pull credentials of every image it did not pull itself, as it did not pull what holdfast imports", f.Policy, f.From)
	if f.Policy == NeverVerifyAllowlistedImages {
		why = fmt.Sprintf("imagePullCredentialsVerificationPolicy %s in %s has it verify the pull credentials of images it did not pull itself unless preloadedImagesVerificationAllowlist names them, and it names no %s", f.Policy, f.From, strings.Join(f.Allowlist, ", "))
	}
	used := units.List(f.UsedBy, 1)
	f.Message = fmt.Sprintf("%s: %s: %s (used by %s); add %s to preloadedImagesVerificationAllowlist with %s, or set %s",
		img.Ref, what, why, used, strings.Join(f.Allowlist, ", "), NeverVerifyAllowlistedImages, NeverVerifyPreloadedImages)
	return &f
}
