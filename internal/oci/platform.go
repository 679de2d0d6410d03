package oci

import (
	"github.com/containerd/platforms"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Platform picks the host platform's manifest out of an index: the content
// of that manifest is what an import requires.
type Platform struct {
	spec    ocispec.Platform
	matcher platforms.MatchComparer
}

// HostPlatform is the platform of the machine holdfast runs on.
func HostPlatform() Platform {
	return Platform{spec: platforms.DefaultSpec(), matcher: platforms.Default()}
}

func (p Platform) String() string { return platforms.Format(p.spec) }

// Matcher is the platform's matcher, for a pull of the same platform.
func (p Platform) Matcher() platforms.MatchComparer { return p.matcher }

// Best returns the index of the best match for the host among manifests, or -1.
func (p Platform) Best(manifests []ocispec.Descriptor) int {
	best := -1
	for i, m := range manifests {
		if m.Platform == nil || !p.matcher.Match(*m.Platform) {
			continue
		}
		if best < 0 || p.matcher.Less(*m.Platform, *manifests[best].Platform) {
			best = i
		}
	}
	return best
}

// Required says, for each of an index's manifests, whether an image whose
// index is required requires it: the best match for the host (best, from
// Best), and a nested index without a platform, which names platforms of
// its own. The others are optional.
func Required(manifests []ocispec.Descriptor, best int) []bool {
	out := make([]bool, len(manifests))
	for i, m := range manifests {
		out[i] = i == best || (m.Platform == nil && IsIndex(m.MediaType))
	}
	return out
}

// HasNestedIndex says whether manifests list an index.
func HasNestedIndex(manifests []ocispec.Descriptor) bool {
	for _, d := range manifests {
		if IsIndex(d.MediaType) {
			return true
		}
	}
	return false
}
