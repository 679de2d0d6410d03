// Package reconcile decides what a pass does to image records and leases. Diff
// is pure: it compares the desired state (the sources' leases) with the actual
// records and returns a Plan. It never unpins a name any kept source wants, and
// only unpins records that carry holdfast's own label.
package reconcile

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// Reason says why an action is in the plan.
type Reason string

const (
	ReasonNew      Reason = "new"      // a source imported in this pass wants it
	ReasonMissing  Reason = "missing"  // the record is gone: heal it
	ReasonDrift    Reason = "drift"    // the record points elsewhere: restore it
	ReasonLabel    Reason = "label"    // a pin label is missing: restore it
	ReasonUnwanted Reason = "unwanted" // no kept source wants it any more
	ReasonGone     Reason = "gone"     // the source is gone
	ReasonReplaced Reason = "replaced" // the source's content changed and the new content is leased
	ReasonStale    Reason = "stale"    // an import that never finished
	ReasonRefused  Reason = "refused"  // the signature policy refuses every image that would have it
)

// Pin creates or updates a record so it points at Target with both pin labels.
type Pin struct {
	Want   runtime.Want
	Reason Reason
	Source string // the path of the source that wants it
	Lease  string
}

// Unpin removes holdfast's pin from a record (and the CRI's, unless it was there before holdfast's).
type Unpin struct {
	Name   string
	Reason Reason
}

// Delete removes a record holdfast made (runtime.LabelCreated) of an image
// the signature policy refuses: under enforce a refused image has no name.
type Delete struct {
	Name   string
	Target string // the refused image's digest: a record re-pointed meanwhile stays
	Reason Reason
}

// Release deletes a source's lease.
type Release struct {
	Lease  string
	Source string
	Reason Reason
}

// Refusal is a want the signature policy refuses (Input.Refused).
type Refusal struct {
	Name   string
	Target string
	Source string
	Lease  string
	Reason string
}

// Conflict is one name that kept sources want with different targets. The
// source with the newest mtime wins; the others' content stays leased.
type Conflict struct {
	Name   string
	Winner Claim
	Losers []Claim
}

// Claim is one source's wish for a name.
type Claim struct {
	Source string
	Lease  string
	Target string // digest
}

// Plan is what a pass will do, in order: pins, then unpins and deletes,
// then releases.
type Plan struct {
	Pins     []Pin
	Unpins   []Unpin
	Deletes  []Delete
	Releases []Release
	// Held are the releases of gone sources that wait (Input.Hold): their
	// leases are kept, and their names stay wanted, this pass.
	Held      []Release
	Conflicts []Conflict
	Refusals  []Refusal // wants the signature policy refuses: not wanted
	// Foreign are the records of refused images that holdfast did not make
	// (a user's, a pull's): left as they are, and reported.
	Foreign     []string
	Wanted      int                     // names of images the kept sources want
	WantedNames map[string]runtime.Want // and their targets (the winners')
	// KeptNames are the wanted names a kept source (holdfast import) wants.
	KeptNames map[string]bool
}

// Empty reports whether the plan changes nothing.
func (p Plan) Empty() bool {
	return len(p.Pins) == 0 && len(p.Unpins) == 0 && len(p.Deletes) == 0 && len(p.Releases) == 0
}

// Present is a source the scan found now.
type Present struct {
	Path     string
	Identity string
}

// Input is everything Diff looks at.
type Input struct {
	// Leases is every holdfast lease in the store, after this pass's imports.
	Leases []runtime.SourceState
	// Present is every source the scan found now, by path.
	Present map[string]Present
	// Unknown holds paths whose fate is unknown this pass (their directory
	// could not be read): their leases are kept as they are.
	Unknown func(path string) bool
	// Hold holds paths of gone sources whose release must wait: a source
	// still being written near them may want what they had (an upgrade that
	// copies the new archive in, then deletes the old one). Their leases are
	// kept as they are, and they are listed in Plan.Held.
	Hold func(path string) bool
	// Named holds names that are never unpinned this pass: a list still being
	// written names them as its file stands, though no lease says so yet.
	Named func(name string) bool
	// Imported holds the leases this pass imported: their pins are "new", not heals.
	Imported map[string]bool
	// Refused says whether the signature policy refuses a want, and why. A
	// refused want is no claim: its name is pinned for another source's
	// want of it that is not refused, or for none (an owned pin on it is
	// removed), and never healed. nil refuses nothing.
	Refused func(w runtime.Want) (reason string, refused bool)
	// Records is every image record in the namespace.
	Records []runtime.Image
	// KeptStaleBefore: an unfinished kept import whose lease was made before
	// it is stale. A younger one may be in flight in another process
	// (holdfast import beside the agent) and is left alone.
	KeptStaleBefore time.Time
}

// Diff compares the desired state with the records and returns the plan.
func Diff(in Input) Plan {
	var plan Plan
	kept := keptLeases(in, &plan)

	// The names kept sources want; on a conflict the newest source wins.
	claims, refused := claimsOf(in, kept, &plan)
	wanted := map[string]claim{}
	for name, cs := range claims {
		sort.SliceStable(cs, func(i, j int) bool { return newer(cs[i].state, cs[j].state) })
		wanted[name] = cs[0]
		var losers []Claim
		for _, c := range cs[1:] {
			if c.want.Target.Digest != cs[0].want.Target.Digest {
				losers = append(losers, Claim{Source: c.state.Source, Lease: c.state.Lease, Target: c.want.Target.Digest.String()})
			}
		}
		if len(losers) > 0 {
			plan.Conflicts = append(plan.Conflicts, Conflict{
				Name:   name,
				Winner: Claim{Source: cs[0].state.Source, Lease: cs[0].state.Lease, Target: cs[0].want.Target.Digest.String()},
				Losers: losers,
			})
		}
	}
	plan.WantedNames = make(map[string]runtime.Want, len(wanted))
	for name, c := range wanted {
		plan.WantedNames[name] = c.want
		if c.want.Signs == "" { // a record of an image's signatures is no image
			plan.Wanted++
		}
	}

	records := map[string]runtime.Image{}
	for _, r := range in.Records {
		if !runtime.IsCRIRecord(r.Name) {
			records[r.Name] = r
		}
	}
	for name, c := range wanted {
		rec, ok := records[name]
		reason := Reason("")
		switch {
		case !ok:
			reason = ReasonMissing
		case rec.Target.Digest != c.want.Target.Digest:
			reason = ReasonDrift
		case !rec.Pinned() || !rec.Owned():
			reason = ReasonLabel
		default:
			continue
		}
		if in.Imported[c.state.Lease] && (!ok || reason == ReasonDrift || !rec.Owned()) {
			reason = ReasonNew
		}
		plan.Pins = append(plan.Pins, Pin{Want: c.want, Reason: reason, Source: c.state.Source, Lease: c.state.Lease})
	}
	for name, rec := range records {
		if _, ok := wanted[name]; ok || (in.Named != nil && in.Named(name)) {
			continue
		}
		target := rec.Target.Digest.String()
		switch {
		case refused[name][target] && rec.Made():
			plan.Deletes = append(plan.Deletes, Delete{Name: name, Target: target, Reason: ReasonRefused})
			continue
		case refused[name][target]:
			plan.Foreign = append(plan.Foreign, name)
		}
		if !rec.Owned() {
			continue
		}
		reason := ReasonUnwanted
		if refused[name] != nil {
			reason = ReasonRefused
		}
		plan.Unpins = append(plan.Unpins, Unpin{Name: name, Reason: reason})
	}
	plan.sort()
	return plan
}

// claim is one kept source's want of a name.
type claim struct {
	want  runtime.Want
	state runtime.SourceState
}

// claimsOf are the wants of the kept leases by name, but those the
// signature policy refuses, which go into plan.Refusals and are returned as
// the refused targets of each name; the names kept sources want go into
// plan.KeptNames.
func claimsOf(in Input, kept []runtime.SourceState, plan *Plan) (map[string][]claim, map[string]map[string]bool) {
	claims := map[string][]claim{}
	refused := map[string]map[string]bool{} // name → refused targets
	for _, st := range kept {
		for _, w := range st.Images {
			if in.Refused != nil {
				if why, no := in.Refused(w); no {
					// A record of a refused image's signatures goes with
					// it; the image's refusal is the one reported.
					if w.Signs == "" {
						plan.Refusals = append(plan.Refusals, Refusal{Name: w.Name, Target: w.Target.Digest.String(), Source: st.Source, Lease: st.Lease, Reason: why})
					}
					if refused[w.Name] == nil {
						refused[w.Name] = map[string]bool{}
					}
					refused[w.Name][w.Target.Digest.String()] = true
					continue
				}
			}
			claims[w.Name] = append(claims[w.Name], claim{w, st})
			if st.Kept {
				if plan.KeptNames == nil {
					plan.KeptNames = map[string]bool{}
				}
				plan.KeptNames[w.Name] = true
			}
		}
	}
	return claims, refused
}

// sort puts each list of the plan in a stable order.
func (p *Plan) sort() {
	sort.Slice(p.Pins, func(i, j int) bool { return p.Pins[i].Want.Name < p.Pins[j].Want.Name })
	sort.Slice(p.Unpins, func(i, j int) bool { return p.Unpins[i].Name < p.Unpins[j].Name })
	sort.Slice(p.Deletes, func(i, j int) bool { return p.Deletes[i].Name < p.Deletes[j].Name })
	sort.Strings(p.Foreign)
	sort.Slice(p.Releases, func(i, j int) bool { return p.Releases[i].Lease < p.Releases[j].Lease })
	sort.Slice(p.Held, func(i, j int) bool { return p.Held[i].Lease < p.Held[j].Lease })
	sort.Slice(p.Conflicts, func(i, j int) bool { return p.Conflicts[i].Name < p.Conflicts[j].Name })
	sort.Slice(p.Refusals, func(i, j int) bool {
		a, b := p.Refusals[i], p.Refusals[j]
		return a.Name < b.Name || a.Name == b.Name && a.Lease < b.Lease
	})
}

// keptLeases returns the leases whose wants stay, and plans the release of the others.
func keptLeases(in Input, plan *Plan) []runtime.SourceState {
	// The complete lease of each present source's current identity.
	current := map[string]bool{}
	for _, st := range in.Leases {
		if p, ok := in.Present[st.Source]; ok && !st.Kept && st.Complete && p.Identity == st.Identity {
			current[st.Source] = true
		}
	}
	var kept []runtime.SourceState
	for _, st := range in.Leases {
		p, present := in.Present[st.Source]
		switch {
		case st.Kept && st.Complete:
			// Kept until released: its file may be gone, moved or changed.
			kept = append(kept, st)
		case st.Kept:
			if st.CreatedAt.Before(in.KeptStaleBefore) {
				plan.Releases = append(plan.Releases, Release{Lease: st.Lease, Source: st.Source, Reason: ReasonStale})
			}
		case in.Unknown != nil && in.Unknown(st.Source):
			if st.Complete {
				kept = append(kept, st)
			}
		case !st.Complete:
			plan.Releases = append(plan.Releases, Release{Lease: st.Lease, Source: st.Source, Reason: ReasonStale})
		case !present && in.Hold != nil && in.Hold(st.Source):
			kept = append(kept, st)
			plan.Held = append(plan.Held, Release{Lease: st.Lease, Source: st.Source, Reason: ReasonGone})
		case !present:
			plan.Releases = append(plan.Releases, Release{Lease: st.Lease, Source: st.Source, Reason: ReasonGone})
		case p.Identity == st.Identity:
			kept = append(kept, st)
		case current[st.Source]:
			plan.Releases = append(plan.Releases, Release{Lease: st.Lease, Source: st.Source, Reason: ReasonReplaced})
		default:
			// The source changed but its new content is not leased (the
			// import failed): what it had stays wanted until it is.
			kept = append(kept, st)
		}
	}
	return kept
}

// newer orders claims: newest source mtime first, then by lease for a stable result.
func newer(a, b runtime.SourceState) bool {
	if a.MtimeNs != b.MtimeNs {
		return a.MtimeNs > b.MtimeNs
	}
	return a.Lease > b.Lease
}

// String describes a conflict for the summary.
func (c Conflict) String() string {
	return fmt.Sprintf("%s: %s (from %s) wins over %d other source(s)", c.Name, short(c.Winner.Target), c.Winner.Source, len(c.Losers))
}

func short(d string) string {
	if len(d) > 19 {
		return d[:19]
	}
	return d
}

// Tagged is refusals without those of a name@digest whose image the same
// source has refused under a tag too: the refusals a person reads.
func Tagged(refusals []Refusal) []Refusal {
	type key struct{ source, target string }
	tagged := map[key]bool{}
	for _, r := range refusals {
		if !strings.Contains(r.Name, "@") {
			tagged[key{r.Source, r.Target}] = true
		}
	}
	var out []Refusal
	for _, r := range refusals {
		if !strings.Contains(r.Name, "@") || !tagged[key{r.Source, r.Target}] {
			out = append(out, r)
		}
	}
	return out
}
