package pass

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/importer"
	"github.com/holdfast-project/holdfast/internal/pattern"
	"github.com/holdfast-project/holdfast/internal/reconcile"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/signature"
	"github.com/holdfast-project/holdfast/internal/source"
	"github.com/holdfast-project/holdfast/internal/units"
)

// KeptStaleAge is how old an unfinished kept import must be before a pass
// releases its lease as stale: a younger one may be in flight in another
// process (holdfast import beside holdfast run).
const KeptStaleAge = time.Hour

// KeepOptions tune Keep.
type KeepOptions struct {
	// Progress, if set, follows the bytes read from the archive file.
	Progress Progress
	// Name names the image of a layout whose index names none (a cosign
	// save layout): holdfast import --name.
	Name string
	// Policy, when set, judges the images: under enforce one it refuses is
	// not pinned, and Keep fails naming it (the others are pinned).
	Policy *signature.Policy
}

// Kept is what Keep did with one path.
type Kept struct {
	Path      string // absolute: the kept source's origin
	Result    hfruntime.ImportResult
	Pinned    int                  // records pinned or restored
	Replaced  []string             // leases of earlier kept imports of the same path, released
	Unpinned  []string             // names only those wanted
	Conflicts []reconcile.Conflict // names another source wants at another target
	// Verdicts are the policy's verdicts on the names the import gave
	// (KeepOptions.Policy), refused ones included.
	Verdicts map[string]signature.Verdict
}

// Keep imports one archive (a split one named by any part, or by its name
// without the part suffix) or OCI layout directory as a kept source: its
// lease is marked kept and stays until released, whatever becomes of the
// file. Its images are pinned as a pass would pin them, every other lease
// taken as it is. Importing the same file again (same identity) reads
// nothing; importing a changed file at the same path replaces the earlier
// kept import: its lease is released once the new one is complete, and the
// names only it wanted are unpinned. A name the lists want as they stand
// (see Standing) is not unpinned.
func Keep(ctx context.Context, rt hfruntime.Backend, path string, standing Standing, opts KeepOptions) (Kept, error) {
	k := Kept{Path: path}
	if abs, err := filepath.Abs(path); err == nil {
		k.Path = abs
	}
	src, err := source.Identify(k.Path)
	if err != nil {
		return k, err
	}
	k.Path = src.Path // a split archive's name, when given one of its parts
	if err := incomplete(src); err != nil {
		return k, fmt.Errorf("import %s: %w", k.Path, err)
	}
	req := importRequest(src, true, opts.Policy != nil, opts.Progress)
	if opts.Name != "" {
		// Another name is another import of the same layout.
		req.Name, req.Identity = opts.Name, req.Identity+",name="+opts.Name
	}
	k.Result, err = importer.Import(ctx, rt.ImportStore(), req)
	if err != nil {
		return k, fmt.Errorf("import %s: %w", k.Path, err)
	}
	err = pinKept(ctx, rt, &k, src.Path, standing, opts)
	return k, err
}

// pinKept pins what the kept import k.Result wants, as a pass would pin it,
// every other lease taken as it is. The earlier kept imports of replaces (a
// path; none when empty) are released once the pins are made, and the names
// only they wanted are unpinned.
func pinKept(ctx context.Context, rt hfruntime.Backend, k *Kept, replaces string, standing Standing, opts KeepOptions) error {
	states, records, err := readStore(ctx, rt)
	if err != nil {
		return fmt.Errorf("import %s: %w", k.Path, err)
	}
	var earlier []hfruntime.SourceState
	states = slices.DeleteFunc(states, func(st hfruntime.SourceState) bool {
		old := replaces != "" && st.Kept && st.Source == replaces && st.Lease != k.Result.Lease
		if old {
			earlier = append(earlier, st)
		}
		return old
	})
	imported := map[string]bool{}
	if !k.Result.Unchanged {
		imported[k.Result.Lease] = true
	}
	judge := signature.Judge{Policy: opts.Policy, Blobs: rt.ImportStore()}
	judgment := judge.For(ctx, states)
	if judgment != nil {
		k.Verdicts = map[string]signature.Verdict{}
		for _, w := range k.Result.Images {
			if w.Signs == "" {
				k.Verdicts[w.Name] = judgment.Of(w.Name, w.Target)
			}
		}
	}
	plan := planAsIs(states, records, imported, judgment.Refuses)
	var errs []error
	for _, r := range plan.Refusals {
		if r.Lease == k.Result.Lease {
			errs = append(errs, fmt.Errorf("image %s refused by the signature policy: %s", r.Name, r.Reason))
		}
	}
	for _, p := range plan.Pins {
		if p.Lease != k.Result.Lease {
			continue
		}
		if _, err := rt.Pin(ctx, p.Want, hfruntime.FirstPin(p.Reason == reconcile.ReasonNew)); err != nil {
			errs = append(errs, fmt.Errorf("pin %s (wanted by %s): %w", p.Want.Name, k.Path, err))
			continue
		}
		k.Pinned++
	}
	// Under enforce a refused image has no name: records holdfast made of
	// this source's refused images (an earlier import under warn) go.
	mine := map[string]bool{}
	for _, w := range k.Result.Images {
		mine[w.Name] = true
	}
	for _, d := range plan.Deletes {
		if mine[d.Name] {
			if err := rt.Delete(ctx, d.Name, digest.Digest(d.Target)); err != nil {
				errs = append(errs, fmt.Errorf("delete %s: %w", d.Name, err))
			}
		}
	}
	for _, c := range plan.Conflicts {
		if c.Winner.Lease == k.Result.Lease || slices.ContainsFunc(c.Losers, func(l reconcile.Claim) bool { return l.Lease == k.Result.Lease }) {
			k.Conflicts = append(k.Conflicts, c)
		}
	}
	if len(errs) > 0 {
		// The earlier import may hold content a failed pin still needs.
		return errors.Join(errs...)
	}
	for _, st := range earlier {
		k.Replaced = append(k.Replaced, st.Lease)
	}
	k.Unpinned, err = releaseLeases(ctx, rt, earlier, plan.WantedNames, standing, records)
	return err
}

// Release is what ReleaseKept did, or would do.
type Release struct {
	Leases   []hfruntime.SourceState // the kept sources released
	Unpinned []string                // the names no other source wants
}

// ReleaseKept ends the kept sources in leases: each lease is deleted, then
// the names that no other lease (another source, a pin list, another kept
// source) wants are unpinned. A pin a user made stays (see Runtime.Unpin).
// With dryRun nothing changes; the result says what would.
func ReleaseKept(ctx context.Context, rt hfruntime.Runtime, leases []hfruntime.SourceState, standing Standing, dryRun bool) (Release, error) {
	rel := Release{Leases: leases}
	states, records, err := readStore(ctx, rt)
	if err != nil {
		return rel, err
	}
	states = slices.DeleteFunc(states, func(st hfruntime.SourceState) bool {
		return slices.ContainsFunc(leases, func(l hfruntime.SourceState) bool { return l.Lease == st.Lease })
	})
	wanted := planAsIs(states, records, nil, nil).WantedNames
	if dryRun {
		rel.Unpinned = unwanted(leases, wanted, standing, records)
		if len(rel.Unpinned) > 0 && standing.Err != nil {
			return rel, standing.Err
		}
		return rel, nil
	}
	rel.Unpinned, err = releaseLeases(ctx, rt, leases, wanted, standing, records)
	return rel, err
}

// KeptSources lists the kept sources in the store.
func KeptSources(ctx context.Context, rt hfruntime.Runtime) ([]hfruntime.SourceState, error) {
	states, err := rt.Sources(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(states, func(st hfruntime.SourceState) bool { return !st.Kept }), nil
}

// MatchKept picks the kept sources the arguments of holdfast release name:
// each a kept source's path (as given, or made absolute) or lease, else a
// pattern of the names of images they hold. An argument that is none of
// these is in bad (then nothing is chosen); one that names nothing is
// reported in missing.
func MatchKept(kept []hfruntime.SourceState, args []string) (chosen []hfruntime.SourceState, missing []error, bad error) {
	var bads []error
	add := func(st hfruntime.SourceState) {
		if !slices.ContainsFunc(chosen, func(c hfruntime.SourceState) bool { return c.Lease == st.Lease }) {
			chosen = append(chosen, st)
		}
	}
	for _, arg := range args {
		abs, _ := filepath.Abs(arg)
		found := false
		for _, st := range kept {
			if st.Source == arg || st.Source == abs || st.Lease == arg {
				add(st)
				found = true
			}
		}
		if found {
			continue
		}
		p, err := pattern.Parse(arg)
		if err != nil {
			bads = append(bads, fmt.Errorf("%q is no kept source, and not a pattern: %w", arg, err))
			continue
		}
		for _, st := range kept {
			if slices.ContainsFunc(st.Images, func(w hfruntime.Want) bool { return p.Match(w.Name) }) {
				add(st)
				found = true
			}
		}
		if !found {
			missing = append(missing, fmt.Errorf("no kept source is %s or holds an image matching it", arg))
		}
	}
	if len(bads) > 0 {
		return nil, nil, errors.Join(bads...)
	}
	return chosen, missing, nil
}

func readStore(ctx context.Context, rt hfruntime.Runtime) ([]hfruntime.SourceState, []hfruntime.Image, error) {
	states, err := rt.Sources(ctx)
	if err != nil {
		return nil, nil, err
	}
	records, err := rt.Records(ctx)
	if err != nil {
		return nil, nil, err
	}
	return states, records, nil
}

// planAsIs plans with every lease taken as it is: no file is looked at, so
// no source counts as gone. It is the plan of a command that acts on a few
// sources only (import, release) beside whatever else the store holds.
func planAsIs(states []hfruntime.SourceState, records []hfruntime.Image, imported map[string]bool, refused func(hfruntime.Want) (string, bool)) reconcile.Plan {
	return reconcile.Diff(reconcile.Input{
		Refused:  refused,
		Leases:   states,
		Unknown:  func(string) bool { return true },
		Imported: imported,
		Records:  records,
	})
}

// unwanted lists the names leases want that are not in wanted, nor wanted by
// the lists as they stand, and that holdfast has pinned.
func unwanted(leases []hfruntime.SourceState, wanted map[string]hfruntime.Want, standing Standing, records []hfruntime.Image) []string {
	owned := map[string]bool{}
	for _, r := range records {
		owned[r.Name] = r.Owned()
	}
	var out []string
	for _, st := range leases {
		for _, w := range st.Images {
			if _, ok := wanted[w.Name]; !ok && owned[w.Name] && !standing.Wants(w.Name) {
				out = append(out, w.Name)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// releaseLeases deletes leases, then unpins the names they wanted that are
// not in wanted. The lease goes first: an agent that sees the unpin and runs
// a pass then finds it gone, and does not pin the name again.
func releaseLeases(ctx context.Context, rt hfruntime.Runtime, leases []hfruntime.SourceState, wanted map[string]hfruntime.Want, standing Standing, records []hfruntime.Image) ([]string, error) {
	var errs []error
	for _, st := range leases {
		if err := rt.Release(ctx, st.Lease); err != nil {
			errs = append(errs, fmt.Errorf("release %s: %w", st.Source, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	names := unwanted(leases, wanted, standing, records)
	if len(names) > 0 && standing.Err != nil {
		return nil, standing.Err
	}
	var done []string
	for _, name := range names {
		if err := rt.Unpin(ctx, name); err != nil {
			errs = append(errs, fmt.Errorf("unpin %s: %w", name, err))
			continue
		}
		done = append(done, name)
	}
	return done, errors.Join(errs...)
}

// lostKept are the failures of the kept sources whose content is no longer
// all in the store (`ctr content rm`, a blob file deleted by hand). A pass
// reads no kept source's file again, and its file is usually gone: nothing
// restores the content, so each such source fails every pass, naming its
// images and the missing blobs, until it is imported again or released.
func lostKept(states []hfruntime.SourceState) []error {
	var errs []error
	for _, st := range states {
		if !st.Kept || !st.Complete || st.Intact {
			continue
		}
		names := make([]string, 0, len(st.Images))
		for _, w := range st.Images {
			if w.Signs == "" {
				names = append(names, w.Name)
			}
		}
		missing := "some of their blobs are"
		if n := len(st.Missing); n > 0 {
			shown := make([]string, 0, min(n, 3))
			for _, d := range st.Missing[:min(n, 3)] {
				shown = append(shown, d.String())
			}
			missing = strings.Join(shown, ", ") + units.More(n-3)
			if n > 3 {
				missing += " blobs are"
			} else if n > 1 {
				missing += " are"
			} else {
				missing += " is"
			}
		}
		again := "the file again (holdfast import " + st.Source + ")"
		if strings.HasPrefix(st.Source, streamMark) {
			again = "the same archive again (holdfast import -)"
		}
		err := fmt.Errorf("content lost: %s missing from the store, needed by %s; nothing restores it but importing %s or releasing it",
			missing, strings.Join(names, ", "), again)
		errs = append(errs, sourceFailed(st.Source, err, fmt.Errorf("kept source %s: %w", st.Source, err)))
	}
	return errs
}
