package pass

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"

	"github.com/holdfast-project/holdfast/internal/importer"
	"github.com/holdfast-project/holdfast/internal/metrics"
	"github.com/holdfast-project/holdfast/internal/pattern"
	"github.com/holdfast-project/holdfast/internal/reconcile"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/source"
)

// pinLists turns each pin list into a source that wants the images its
// patterns match, whatever brought them, and leases their content, so a pin
// outlives the archive that brought the image and heal still works. A name
// that a present archive wants is left to that archive; the moment the
// archive goes, the pin list takes the name over in the same pass, before the
// archive's lease is released. A wanted name whose record was deleted stays
// wanted (and is healed) for as long as a pattern matches it. It also
// returns the lists it could not read or lease: they keep what they had.
func (p *Runner) pinLists(ctx context.Context, lists []source.Source, scan source.Result, v *view, sum *Summary, imported map[string]bool) (map[string]reconcile.Present, []string) {
	present := map[string]reconcile.Present{}
	read := map[string][]pattern.Pattern{} // the patterns of the lists read: late images that match bring on a pass
	defer func() { p.hand.PinLists(pinListPaths(scan), read) }()
	records, states, ok := storeView(v, len(lists), sum)
	if !ok {
		return present, unjudged(lists, sum)
	}
	current := map[string]string{} // archive path → identity now
	for _, s := range scan.Sources {
		if s.Kind == source.Archive || s.Kind == source.OCIDir {
			current[s.Path] = s.Identity
		}
	}
	byArchive := map[string]bool{}
	for _, st := range states {
		if id, ok := current[st.Source]; ok && st.Complete && st.Identity == id {
			for _, w := range st.Images {
				byArchive[w.Name] = true
			}
		}
	}
	var unknown []string
	for _, src := range lists {
		pl, err := source.ReadPinList(src.Path)
		if err != nil {
			unknown = append(unknown, listUnread(src, err, sum))
			continue
		}
		failuresBefore := len(sum.Failures)
		for _, le := range pl.Errors {
			sum.Failures = append(sum.Failures, le)
		}
		for _, p := range pl.Patterns {
			read[src.Path] = append(read[src.Path], p.Pattern)
		}
		matches := func(name string) bool {
			for _, p := range pl.Patterns {
				if p.Pattern.Match(name) {
					return true
				}
			}
			return false
		}
		wants := map[string]hfruntime.Want{}
		for _, r := range records {
			if !hfruntime.IsCRIRecord(r.Name) && !byArchive[r.Name] && matches(r.Name) {
				wants[r.Name] = hfruntime.Want{Name: r.Name, Target: r.Target}
			}
		}
		for _, st := range states {
			if st.Source != src.Path || !st.Complete {
				continue
			}
			for _, w := range st.Images {
				if _, ok := wants[w.Name]; !ok && !byArchive[w.Name] && matches(w.Name) {
					wants[w.Name] = w
				}
			}
		}
		list := make([]hfruntime.Want, 0, len(wants))
		for _, w := range wants {
			list = append(list, w)
		}
		sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
		// A pin list's mtime is 0: on a conflict, an archive's target wins.
		if !p.leaseList(ctx, "pin list", src, 0, list, v, failuresBefore, sum, imported, present) {
			unknown = append(unknown, src.Path)
		}
	}
	return present, unknown
}

// listUnread fails a list that cannot be read and returns its path: what it
// had stays as it is.
func listUnread(src source.Source, err error, sum *Summary) string {
	sum.Failures = append(sum.Failures, sourceFailed(src.Path, err, err))
	sum.set(src, metrics.StateFailed)
	return src.Path
}

// unjudged marks lists failed when the store could not be read for them,
// and returns their paths: what they had stays as it is.
func unjudged(lists []source.Source, sum *Summary) []string {
	var paths []string
	for _, src := range lists {
		sum.set(src, metrics.StateFailed)
		paths = append(paths, src.Path)
	}
	return paths
}

// storeView is the records and the source states of the pass's view, with
// its imports done, for the list sources of a pass; false when there are
// none or the store could not be listed.
func storeView(v *view, lists int, sum *Summary) ([]hfruntime.Image, []hfruntime.SourceState, bool) {
	if lists == 0 {
		return nil, nil, false
	}
	states, records, err := v.now()
	if err != nil {
		sum.Failures = append(sum.Failures, err)
		return nil, nil, false
	}
	return records, states, true
}

// leaseList leases what a list source wants, under an identity made of the
// file's and of the wants, and records the outcome: the source's state, and
// whether it is present (and newly leased) for the plan. False means its
// fate is unknown this pass: its old lease must stay.
func (p *Runner) leaseList(ctx context.Context, what string, src source.Source, mtimeNs int64, wants []hfruntime.Want, v *view,
	failuresBefore int, sum *Summary, imported map[string]bool, present map[string]reconcile.Present) bool {
	identity := src.Identity + ",wants=" + wantsHash(wants)
	res, err := importer.LeaseWants(ctx, p.store, hfruntime.LeaseRequest{Source: src.Path, Identity: identity, MtimeNs: mtimeNs, Wants: wants})
	v.put(res.State)
	if err != nil {
		sum.Failures = append(sum.Failures, sourceFailed(src.Path, err, fmt.Errorf("%s %s: %w", what, src.Path, err)))
	}
	sum.set(src, stateAfter(len(sum.Failures) > failuresBefore))
	if res.Lease == "" || (err != nil && len(res.Images) == 0 && len(wants) > 0) {
		return false
	}
	present[src.Path] = reconcile.Present{Path: src.Path, Identity: identity}
	if res.Unchanged {
		sum.Unchanged++
	} else {
		imported[res.Lease] = true
		sum.Imported++
	}
	return true
}

func wantsHash(ws []hfruntime.Want) string {
	h := sha256.New()
	for _, w := range ws {
		fmt.Fprintf(h, "%s=%s\n", w.Name, w.Target.Digest)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// stateAfter is a list source's state: failed when any of its lines failed.
func stateAfter(failed bool) string {
	if failed {
		return metrics.StateFailed
	}
	return metrics.StateApplied
}
