package pass

import (
	"context"
	"errors"
	"github.com/opencontainers/go-digest"
	"sync"

	"github.com/holdfast-project/holdfast/internal/importer"
	"github.com/holdfast-project/holdfast/internal/reconcile"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/source"
)

// Action is one thing a pass does, as a dry run reports it (holdfast plan):
// import, remove (a spool file, once imported), pull, pin, heal, unpin,
// release or refuse (an image the signature policy refuses: not pinned), with
// its reason and source.
type Action struct {
	Action string `json:"action"`
	Name   string `json:"name,omitempty"`
	Target string `json:"target,omitempty"`
	Lease  string `json:"lease,omitempty"`
	Source string `json:"source,omitempty"`
	Reason string `json:"reason"`
	// Error is what the action would meet (an archive that cannot be read):
	// a pass would try it and report that.
	Error string `json:"error,omitempty"`
	// Format and Skipped, for an import, are the archive's layout and the
	// count, by reason, of a bundle's entries that are no images.
	Format  string         `json:"format,omitempty"`
	Skipped map[string]int `json:"skipped,omitempty"`
}

// DryRun runs one pass as Sync does, over rt with every write left undone,
// and returns what the pass would do. It is the same pass: the same scan,
// spool dirs, markers, retries and plan. Sources to import are read (so the
// names they would pin are known) but nothing is written (importer.DryRun):
// the pass's view of the store takes in what each import would leave, as a
// real pass's takes in what it wrote. A pull list reference not in the store
// is reported as a pull, its pin follows it.
func DryRun(ctx context.Context, rt hfruntime.Backend, cfg Config) ([]Action, Summary) {
	r := New(dryRuntime{rt}, cfg)
	r.actions = &actionLog{}
	sum, _ := r.Run(ctx, Options{})
	return r.actions.list, sum
}

// actionLog is what a dry run records.
type actionLog struct {
	mu   sync.Mutex
	list []Action
}

func (l *actionLog) add(a Action) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = append(l.list, a)
}

// errDryRun is what a dry run meets where a pass would reach a registry.
var errDryRun = errors.New("a dry run does not pull")

// dryRuntime is a backend whose writes are left undone: imports and list
// leases read and work out all they would, writing nothing.
type dryRuntime struct{ hfruntime.Backend }

func (d dryRuntime) ImportStore() hfruntime.Store { return importer.DryRun(d.Backend.ImportStore()) }

func (dryRuntime) Pull(context.Context, string, hfruntime.PullOptions) (hfruntime.Want, error) {
	return hfruntime.Want{}, errDryRun
}

func (dryRuntime) TempLease(context.Context) (string, error) {
	return hfruntime.LeasePrefix + "dry-run", nil
}

func (dryRuntime) Pin(context.Context, hfruntime.Want, ...hfruntime.PinOption) (hfruntime.PinResult, error) {
	return hfruntime.PinResult{}, nil
}

func (dryRuntime) Unpin(context.Context, string) error                 { return nil }
func (dryRuntime) Delete(context.Context, string, digest.Digest) error { return nil }
func (dryRuntime) Release(context.Context, string) error               { return nil }
func (dryRuntime) Cleanup(context.Context) error                       { return nil }

// importReason says why a pass imports src: no lease of its path ("new"),
// one of another identity ("changed"), or one whose content is gone.
func importReason(src source.Source, leases []hfruntime.SourceState, kept bool) string {
	known := false
	for _, st := range leases {
		if st.Source != src.Path || st.Kept != kept {
			continue // an images-dir lease and a kept one of the same file are sources of their own
		}
		known = true
		if st.Identity == src.Identity && st.Complete && !st.Intact {
			return "leased content is gone"
		}
	}
	if known {
		return "changed"
	}
	return "new"
}

// recordImport notes, in a dry run, the import of src and how it would end.
func (p *Runner) recordImport(src source.Source, leases []hfruntime.SourceState, kept bool, res hfruntime.ImportResult, err error) {
	if p.actions == nil || (err == nil && res.Unchanged) {
		return
	}
	act := Action{Action: "import", Source: src.Path, Lease: res.Lease, Reason: importReason(src, leases, kept), Format: res.Format, Skipped: res.State.Skipped}
	if err != nil {
		act.Error = causeOf(err).Error()
	}
	p.actions.add(act)
}

// recordPlan notes, in a dry run, what apply does with plan.
func (p *Runner) recordPlan(plan reconcile.Plan) {
	if p.actions == nil {
		return
	}
	for _, pin := range plan.Pins {
		if pin.Want.Signs != "" {
			continue // a record of an image's signatures goes with the image
		}
		action := "heal"
		if pin.Reason == reconcile.ReasonNew {
			action = "pin"
		}
		p.actions.add(Action{Action: action, Name: pin.Want.Name, Target: pin.Want.Target.Digest.String(), Lease: pin.Lease, Source: pin.Source, Reason: string(pin.Reason)})
	}
	for _, u := range plan.Unpins {
		p.actions.add(Action{Action: "unpin", Name: u.Name, Reason: string(u.Reason)})
	}
	for _, d := range plan.Deletes {
		p.actions.add(Action{Action: "delete", Name: d.Name, Target: d.Target, Reason: string(d.Reason)})
	}
	for _, r := range plan.Releases {
		p.actions.add(Action{Action: "release", Lease: r.Lease, Source: r.Source, Reason: string(r.Reason)})
	}
	for _, r := range plan.Refusals {
		p.actions.add(Action{Action: "refuse", Name: r.Name, Target: r.Target, Lease: r.Lease, Source: r.Source, Reason: r.Reason})
	}
}
