package exporter

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/pattern"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

// Selection says which images an export takes: those whose names match a
// pattern, those a source wants, and with All every image holdfast pins.
// Each pattern and each source must give at least one image. With a
// Policy, the images it refuses are named (Plan.Refused), and with
// SignedOnly left out.
type Selection struct {
	Patterns []pattern.Pattern
	// Sources are sources as status names them: the path an images-dir
	// file or a kept source was imported from (the file need not exist),
	// or a lease ID.
	Sources []string
	All     bool
	// Policy judges the images chosen; nil judges none.
	Policy     Policy
	SignedOnly bool
}

// choose picks the images sel names: records (by pattern, or pinned by
// holdfast for All) at their targets, and the wants of the sources named,
// at the targets the sources hold. The CRI's own sha256: records and
// cosign's signature tags are never images of their own: signatures come
// with the images they sign. A name chosen at two targets is an error.
func choose(records []runtime.Image, states []runtime.SourceState, sel Selection) ([]Image, error) {
	chosen := map[string]Image{}
	var errs []error
	take := func(name string, target Image) {
		if prev, ok := chosen[name]; ok && prev.Target.Digest != target.Target.Digest {
			errs = append(errs, fmt.Errorf("%s is chosen at two targets, %s and %s: the record was moved away from what its source holds; export the source or the name alone", name, prev.Target.Digest, target.Target.Digest))
			return
		}
		chosen[name] = target
	}
	eligible := func(name string) bool {
		_, sig := oci.SignedBy(name)
		return !runtime.IsCRIRecord(name) && !sig
	}
	if sel.All {
		for _, r := range records {
			if r.Owned() && eligible(r.Name) {
				take(r.Name, Image{Name: r.Name, Target: r.Target})
			}
		}
	}
	for _, p := range sel.Patterns {
		found := false
		for _, r := range records {
			if eligible(r.Name) && p.Match(r.Name) {
				take(r.Name, Image{Name: r.Name, Target: r.Target})
				found = true
			}
		}
		if !found {
			errs = append(errs, fmt.Errorf("no image in the store matches %s", p))
		}
	}
	for _, s := range sel.Sources {
		sts, err := sourcesNamed(states, s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, st := range sts {
			for _, w := range st.Images {
				if eligible(w.Name) && w.Signs == "" {
					take(w.Name, Image{Name: w.Name, Target: w.Target})
				}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(chosen) == 0 {
		return nil, errors.New("no image to export")
	}
	out := make([]Image, 0, len(chosen))
	for _, img := range chosen {
		out = append(out, img)
	}
	slices.SortFunc(out, func(a, b Image) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// sourcesNamed are the complete sources s names: by path (as given, or
// made absolute; an images-dir file and a kept import of it are two) or by
// lease ID.
func sourcesNamed(states []runtime.SourceState, s string) ([]runtime.SourceState, error) {
	abs, _ := filepath.Abs(s)
	var out []runtime.SourceState
	var unfinished error
	for _, st := range states {
		if st.Source != s && st.Source != abs && st.Lease != s {
			continue
		}
		if !st.Complete {
			unfinished = fmt.Errorf("source %s has not finished importing (lease %s)", st.Source, st.Lease)
			continue
		}
		out = append(out, st)
	}
	switch {
	case len(out) > 0:
		return out, nil
	case unfinished != nil:
		return nil, unfinished
	}
	return nil, fmt.Errorf("no source is %s: holdfast status lists the sources and their leases", s)
}
