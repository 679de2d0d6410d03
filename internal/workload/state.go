package workload

import (
	"slices"

	"github.com/distribution/reference"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// State is where an image stands on a node.
type State string

const (
	Pinned   State = "pinned"   // a record of that name, pinned: the kubelet's GC keeps it
	Present  State = "present"  // a record of that name, not pinned: the kubelet's GC may delete it
	Missing  State = "missing"  // no record of that name: the kubelet would pull it
	Mismatch State = "mismatch" // a digest reference whose repository the node holds at other digests only
)

// Verdict is where one image stands.
type Verdict struct {
	Image
	State State `json:"state"`
	// Target is the digest the record of that name points at.
	Target string `json:"target,omitempty"`
	// Others are, for a mismatch, the digests the node holds the
	// repository at.
	Others []string `json:"others,omitempty"`
}

// Judge says where each image stands among records, as the kubelet would
// find it: by its exact name, a tag and a digest reference by its digest
// name (repo@sha256:…, what the CRI resolves it by).
func Judge(images []Image, records []runtime.Image) []Verdict {
	byName := map[string]runtime.Image{}
	for _, r := range records {
		if !runtime.IsCRIRecord(r.Name) {
			byName[r.Name] = r
		}
	}
	// The digests each repository is held at, for a digest reference the
	// node does not hold: made on first need (parsing every record's name is
	// most of a judgment's cost, and tags never need it).
	var byRepo map[string][]string
	repoDigests := func(repo string) []string {
		if byRepo == nil {
			byRepo = map[string][]string{}
			for _, r := range byName {
				if n, err := reference.ParseNormalizedNamed(r.Name); err == nil {
					if d := r.Target.Digest.String(); !slices.Contains(byRepo[n.Name()], d) {
						byRepo[n.Name()] = append(byRepo[n.Name()], d)
					}
				}
			}
		}
		return byRepo[repo]
	}
	out := make([]Verdict, 0, len(images))
	for _, img := range images {
		v := Verdict{Image: img, State: Missing}
		name := img.Ref
		n, err := reference.ParseNormalizedNamed(img.Ref)
		var dg string
		if err == nil {
			if c, ok := n.(reference.Canonical); ok {
				// The CRI drops the tag of name:tag@digest.
				dg = c.Digest().String()
				name = n.Name() + "@" + dg
			}
		}
		if r, ok := byName[name]; ok {
			v.Target = r.Target.Digest.String()
			v.State = Present
			if r.Pinned() {
				v.State = Pinned
			}
		} else if dg != "" {
			if others := repoDigests(n.Name()); len(others) > 0 && !slices.Contains(others, dg) {
				v.State, v.Others = Mismatch, slices.Sorted(slices.Values(others))
			}
		}
		out = append(out, v)
	}
	return out
}
