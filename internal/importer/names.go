package importer

import (
	"sort"
	"strings"

	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/archive"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

// Wants are the names an archive's images get: each name, and a repo@digest
// name for every repo:tag name, so that digest references resolve too;
// sorted by name.
func Wants(imgs []archive.Image) []runtime.Want {
	seen := map[string]bool{}
	var out []runtime.Want
	add := func(name, recorded string, target ocispec.Descriptor) {
		if !seen[name] {
			seen[name] = true
			out = append(out, runtime.Want{Name: name, Target: target, Recorded: recorded})
		}
	}
	for _, img := range imgs {
		add(img.Name, img.Recorded, img.Target)
		if dn, ok := DigestName(img.Name, img.Target.Digest); ok {
			add(dn, "", img.Target)
		}
	}
	return sortedWants(out)
}

// sortedWants are ws sorted by name.
func sortedWants(ws []runtime.Want) []runtime.Want {
	sort.Slice(ws, func(i, j int) bool { return ws[i].Name < ws[j].Name })
	return ws
}

// DigestName is the repo@digest name of name's repository at d, and whether
// it is another name than name.
func DigestName(name string, d digest.Digest) (string, bool) {
	ref, err := reference.ParseNormalizedNamed(name)
	if err != nil {
		return "", false
	}
	if _, ok := ref.(reference.Digested); ok {
		return "", false
	}
	dn, err := reference.WithDigest(reference.TrimNamed(ref), d)
	if err != nil {
		return "", false
	}
	return dn.String(), !strings.EqualFold(dn.String(), name)
}
