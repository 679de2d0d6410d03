package runtime

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
