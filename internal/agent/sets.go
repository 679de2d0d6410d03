package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-project/holdfast/internal/pass"
	"github.com/holdfast-project/holdfast/internal/pattern"
	"github.com/holdfast-project/holdfast/internal/report"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
)

// The ImageSets on the node (PUT /sets): each set that selects the node is
// a source of its own, a list of kind peers that the agent owns and writes
// at <data-dir>/peers/sets/<name>.txt (Config.SetLists), pulled through the
// node's mirrors (its peers first), pinned and leased like the peer list,
// whose lease is named after its path. What a set's list names: of its
// images, those the reporter says the node may pull now (the waves:
// StageSet.MayPull), those it named before (a pull once started goes on,
// retried with backoff), and those the store holds under that name (pinned
// as they are, without a pull). An image that left the set, and every image
// of a set that no longer selects the node or is no longer sent, stays
// listed for the grace period (Config.PeerGrace), kept as its lease holds it
// and never pulled anew; then its line goes (the file with its last line)
// and the pass releases it. Nothing another source wants is unpinned.
//
// At start, until the reporter's first PUT /sets, the lists on disk stay as
// they are: a pass keeps what they leased and pulls nothing new.

// sets is what the agent keeps of the ImageSets: the body the reporter last
// sent, a list per set, and where each image stood at the last judgment.
type sets struct {
	rt      hfruntime.Runtime
	dir     string // Config.SetLists; "" when the agent keeps none
	grace   time.Duration
	insec   bool // Config.InsecurePerms
	pulls   pullState
	changed func() // a list was written: a pass takes it
	clock   Clock
	log     *slog.Logger
	kicks   chan struct{} // judge the sets again
	timer   Timer         // the next grace ends

	judging sync.Mutex // one judgment at a time

	mu     sync.Mutex
	body   []stageSet          // as last sent, sorted by name; nil before
	known  bool                // the reporter sent a body
	lists  map[string]*ownList // by set name
	since  map[string]time.Time
	states []report.SetState // as last judged
	// sentTo is, by set name and reference, the peer mirror the waves sent
	// the node to when its list took the reference to pull it (the holder
	// that serves it): said in the report while the image is listed, so
	// that the waves count what each holder served.
	sentTo map[string]map[string]string
}

// stageSet is a set as the agent takes it: its references normalised, each
// once; those that do not parse are in bad, by the reference as sent.
type stageSet struct {
	report.StageSet
	bad     map[string]string // ref as sent → why it does not parse
	mayPull map[string]bool
	from    map[string]string // ref → the peer mirror to pull it from first
}

func newSets(rt hfruntime.Runtime, cfg Config, pulls pullState, changed func(), clock Clock, log *slog.Logger) *sets {
	return &sets{rt: rt, dir: cfg.SetLists, grace: cfg.PeerGrace, insec: cfg.InsecurePerms, pulls: pulls, changed: changed,
		clock: clock, log: log, kicks: make(chan struct{}, 1), timer: clock.NewTimer(), lists: map[string]*ownList{}, since: map[string]time.Time{},
		sentTo: map[string]map[string]string{}}
}

// SetSets takes the ImageSets the reporter knows (PUT /sets). A set name
// that is not a DNS subdomain name, or that comes twice, is an error naming
// it, and nothing is taken; a reference that does not parse is that image
// failed, in the report, and the others go on. The sets are judged, and
// their lists written, before it returns, and again after every pass and
// image event.
func (a *Agent) SetSets(ctx context.Context, body report.StageSets) error {
	return a.sets.take(ctx, body)
}

// take is SetSets.
func (s *sets) take(ctx context.Context, body report.StageSets) error {
	seen := map[string]bool{}
	out := make([]stageSet, 0, len(body.Sets))
	for _, set := range body.Sets {
		if err := validSetName(set.Name); err != nil {
			return err
		}
		if seen[set.Name] {
			return fmt.Errorf("set %q: sent twice", set.Name)
		}
		seen[set.Name] = true
		out = append(out, normalSet(set))
	}
	sortSets(out)
	s.mu.Lock()
	s.body, s.known = out, true
	s.mu.Unlock()
	s.judge(ctx)
	return nil
}

// validSetName says why name is not a DNS subdomain name (RFC 1123, as the
// API server allows for an ImageSet): at most 253 characters, dot-separated
// labels of a-z, 0-9 and '-', each starting and ending with a letter or
// digit. Such a name is also a file name in Config.SetLists, never a path.
func validSetName(name string) error {
	bad := func(why string) error { return fmt.Errorf("set name %q: not a DNS subdomain name: %s", name, why) }
	if name == "" || len(name) > 253 {
		return bad("empty or longer than 253 characters")
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" {
			return bad("an empty label (a leading, trailing or doubled '.')")
		}
		for i, c := range label {
			alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
			if !alnum && (c != '-' || i == 0 || i == len(label)-1) {
				return bad("only lowercase a-z, 0-9, '-' (not first or last in a label) and '.'")
			}
		}
	}
	return nil
}

// normalSet is set with its references normalised.
func normalSet(set report.StageSet) stageSet {
	out := stageSet{StageSet: set, bad: map[string]string{}, mayPull: map[string]bool{}, from: map[string]string{}}
	out.Images, out.MayPull, out.From = nil, nil, nil
	seen := map[string]bool{}
	for _, raw := range set.Images {
		ref, err := pattern.NormalizeRef(strings.TrimSpace(raw))
		switch {
		case err != nil:
			out.bad[raw] = err.Error()
		case !seen[ref]:
			seen[ref] = true
			out.Images = append(out.Images, ref)
		}
	}
	for _, raw := range set.MayPull {
		if ref, err := pattern.NormalizeRef(strings.TrimSpace(raw)); err == nil && seen[ref] {
			out.mayPull[ref] = true
		}
	}
	for raw, from := range set.From {
		if ref, err := pattern.NormalizeRef(strings.TrimSpace(raw)); err == nil && seen[ref] && from != "" {
			out.from[ref] = from
		}
	}
	return out
}

// kick asks for the sets to be judged again.
func (s *sets) kick() {
	select {
	case s.kicks <- struct{}{}:
	default:
	}
}

// run judges the sets when kicked, and when the next grace ends, until ctx
// ends.
func (s *sets) run(ctx context.Context) {
	defer s.timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kicks:
			s.judge(ctx)
		case <-s.timer.C():
			s.judge(ctx)
		}
	}
}

// judge brings each set's list in line with the sets as last sent and the
// store as it is, says where each image stands, and arms the timer for the
// next grace to end.
func (s *sets) judge(ctx context.Context) {
	if s.dir == "" {
		return
	}
	s.judging.Lock()
	defer s.judging.Unlock()
	records, err := s.rt.Records(ctx)
	if err != nil {
		s.log.Warn("listing the records to judge the image sets", "error", err)
		return
	}
	names, pinned := map[string]bool{}, map[string]bool{}
	for _, r := range records {
		if !hfruntime.IsCRIRecord(r.Name) {
			names[r.Name] = true
			pinned[r.Name] = pinned[r.Name] || r.Pinned()
		}
	}
	s.mu.Lock()
	wrote, due := s.updateLocked(names)
	s.states = s.statesLocked(pinned)
	s.mu.Unlock()
	if !due.IsZero() {
		s.timer.Reset(max(due.Sub(s.clock.Now()), 0) + 100*time.Millisecond)
	}
	if wrote {
		s.changed()
	}
}

// wants is the references a set's list is for now: every image of the set
// when it selects the node; none when it does not, or is not sent.
func (s *sets) wantsLocked(name string) (stageSet, map[string]bool) {
	in := map[string]bool{}
	for _, set := range s.body {
		if set.Name == name {
			if set.Selected {
				for _, ref := range set.Images {
					in[ref] = true
				}
			}
			return set, in
		}
	}
	return stageSet{}, in
}

// updateLocked brings every list in line with the sets as last sent, names
// being the names the store holds; nothing before the reporter's first
// body. It says whether it wrote a list, and when the next grace ends.
func (s *sets) updateLocked(names map[string]bool) (wrote bool, due time.Time) {
	if !s.known {
		return false, time.Time{}
	}
	s.readDirLocked()
	for _, set := range s.body {
		if _, ok := s.lists[set.Name]; !ok && set.Selected {
			s.lists[set.Name] = s.newList(set.Name)
		}
	}
	now := s.clock.Now()
	for name, l := range s.lists {
		if !l.load() {
			continue
		}
		set, in := s.wantsLocked(name)
		next := l.age(in, now, s.grace, "it left the set, or the set this node")
		for _, ref := range set.Images {
			if in[ref] && !next[ref] && (set.mayPull[ref] || names[ref]) {
				next[ref] = true
				s.log.Info("keeping an image of a set: pulled from peers unless held", "set", name, "ref", ref, "held", names[ref])
				if from := set.from[ref]; from != "" && !names[ref] {
					if s.sentTo[name] == nil {
						s.sentTo[name] = map[string]string{}
					}
					s.sentTo[name][ref] = from
				}
			}
		}
		before := l.refs
		l.write(next)
		wrote = wrote || !slices.Equal(before, l.refs)
		for ref := range s.sentTo[name] {
			if !l.listed(ref) {
				delete(s.sentTo[name], ref)
			}
		}
		if len(s.sentTo[name]) == 0 {
			delete(s.sentTo, name)
		}
		if len(l.refs) == 0 && len(in) == 0 {
			delete(s.lists, name)
		}
		if d := l.due(s.grace); !d.IsZero() && (due.IsZero() || d.Before(due)) {
			due = d
		}
	}
	return wrote, due
}

// newList is the list of the set name.
func (s *sets) newList(name string) *ownList {
	return &ownList{path: filepath.Join(s.dir, name+".txt"), what: "set list", header: setHeader(name), max: report.MaxSetImages,
		insecurePerms: s.insec, log: s.log.With("set", name)}
}

// setHeader starts the list's file of the set name.
func setHeader(name string) string {
	return "# The images of the ImageSet " + name + " kept on this node, pulled from its peers (holdfast run).\n" +
		"# The agent writes this file: edits are not obeyed, and overwritten.\n"
}

// readDirLocked takes every list in the dir as one the agent wrote, the
// first time and whenever one appears: its file is read (and checked) as
// the list loads.
func (s *sets) readDirLocked() {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("reading the image sets' lists; those on disk stay as they are", "dir", s.dir, "error", err)
		}
		return
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".txt")
		if !ok || !e.Type().IsRegular() || validSetName(name) != nil {
			continue
		}
		if _, ok := s.lists[name]; !ok {
			s.lists[name] = s.newList(name)
		}
	}
}

// forPass gives a pass the references of every set's list, by path; those
// their set does not want now are only kept (all of them before the
// reporter's first body); those it wants, each with the holder the
// reporter last sent for it (StageSet.From), pulled from there first. A
// list that cannot be read is named without them: the pass reads its file
// as a list of kind peers.
func (s *sets) forPass(out map[string]pass.PeerRefs) {
	if s.dir == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readDirLocked()
	for name, l := range s.lists {
		if !l.load() {
			out[l.path] = pass.PeerRefs{}
			continue
		}
		set, in := s.wantsLocked(name)
		if !s.known {
			in = nil
		}
		refs := l.forPass(in)
		for ref, from := range set.from {
			if in[ref] {
				if refs.Prefer == nil {
					refs.Prefer = map[string]string{}
				}
				refs.Prefer[ref] = from
			}
		}
		out[l.path] = refs
	}
}
