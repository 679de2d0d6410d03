package workload

import (
	"slices"

	"github.com/distribution/reference"

	"github.com/holdfast-project/holdfast/internal/report"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

// Ready is the one rule of what counts as ready for an image on a node,
// which the agent's report, holdfast check and check --cluster all apply:
// pinned, or, when unpinned images are allowed (check --allow-unpinned),
// present. The agent's report and the node's condition allow none.
func Ready(s report.State, allowUnpinned bool) bool {
	return s == report.Pinned || (allowUnpinned && s == report.Present)
}

// Judge says where each image stands among records, as the kubelet would
// find it: by its exact name, a tag and a digest reference by its digest
// name (repo@sha256:…, what the CRI resolves it by). It gives a row for
// each image, in order, with its state, target and the digests of a
// mismatch; the callers say who uses it.
func Judge(images []Image, records []runtime.Image) []report.Image {
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
	out := make([]report.Image, 0, len(images))
	for _, img := range images {
		v := report.Image{Ref: img.Ref, State: report.Missing}
		name, repo, dg := CRIName(img.Ref)
		if r, ok := byName[name]; ok {
			v.Target = r.Target.Digest.String()
			v.State = report.Present
			if r.Pinned() {
				v.State = report.Pinned
			}
		} else if dg != "" {
			if others := repoDigests(repo); len(others) > 0 && !slices.Contains(others, dg) {
				v.State, v.Others = report.Mismatch, slices.Sorted(slices.Values(others))
			}
		}
		out = append(out, v)
	}
	return out
}

// CRIName is the record name the CRI looks ref (normalised) up by: ref
// itself, or for a digest reference repo@digest (the CRI drops the tag of
// name:tag@digest); repo is its repository and dg its digest ("" for a tag).
func CRIName(ref string) (name, repo, dg string) {
	n, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ref, "", ""
	}
	if c, ok := n.(reference.Canonical); ok {
		dg = c.Digest().String()
		return n.Name() + "@" + dg, n.Name(), dg
	}
	return ref, n.Name(), ""
}

// Check is holdfast check's judgment of images on a node: a row for each,
// in order, as Judge finds it among records, with its users and, for one
// the node holds, why the kubelet would pull it again (forced returns nil
// when it would not). failed says whether an image is not ready (Ready); a
// forced pull does not fail it.
func Check(images []Image, records []runtime.Image, allowUnpinned bool, forced func(Image) *report.ForcedPull) (rows []report.Image, failed bool) {
	rows = Judge(images, records)
	for i, img := range images {
		rows[i].UsedBy = img.UsedBy()
		if rows[i].State == report.Pinned || rows[i].State == report.Present {
			rows[i].ForcedPull = forced(img)
		}
		if !Ready(rows[i].State, allowUnpinned) {
			failed = true
		}
	}
	return rows, failed
}
