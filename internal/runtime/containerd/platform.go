package containerd

import (
	"github.com/containerd/platforms"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// platformMatcher picks the host platform's manifest out of an index.
type platformMatcher struct {
	spec    ocispec.Platform
	matcher platforms.MatchComparer
}

func hostPlatform() platformMatcher {
	return platformMatcher{spec: platforms.DefaultSpec(), matcher: platforms.Default()}
}

func (p platformMatcher) String() string { return platforms.Format(p.spec) }

// best returns the index of the best match for the host among manifests, or -1.
func (p platformMatcher) best(manifests []ocispec.Descriptor) int {
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
