package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-project/holdfast/internal/files"
	"github.com/holdfast-project/holdfast/internal/pass"
	"github.com/holdfast-project/holdfast/internal/report"
	"github.com/holdfast-project/holdfast/internal/source"
)

// The peer source (holdfast run --pull-required): a pull list the agent
// owns, naming each image of the node's required set that the node lacked
// (or held unpinned) when it was judged. Passes take its references from
// the agent (pass.Handoff's Peers), not from its file: they pull what it
// names through the node's registry mirrors (spegel serves what a peer
// holds), and pin and lease it like any pull list's; an image that leaves
// the required set stays listed for the grace period, so that a workload
// moving away and back does not release it, and is kept only as the source
// leased it, never pulled again; then its line goes and the pass releases
// it. Nothing another source wants is unpinned: the pass unpins only what
// no source wants.
//
// The file, <data-dir>/peers/required.txt, is the record of the list for
// restarts. A line added or removed by hand is not obeyed: the agent writes
// its own list back over the file at each pass and each judgment. At start
// the agent takes the file as the list it wrote last, as the data dir is
// root's (0700; a file or dir on its way that someone else could write is
// refused, as for any list, unless --insecure-perms): and whatever the file
// says then, nothing on it is pulled, pinned or leased anew until the
// reporter's required set names it; the rest is only kept as the source's
// lease holds it, for the grace period. A line added by hand while the agent
// was stopped brings nothing in; a line removed then lets go at the first
// pass of what it held, as deleting the file would.

// DefaultPeerGrace is how long an image that left the required set stays on
// the peer list.
const DefaultPeerGrace = 10 * time.Minute

// maxPeerRefs bounds the peer list well within what a pull list may hold
// (source.MaxListLines, source.MaxListBytes).
const maxPeerRefs = 10_000

// peerSource is what the agent keeps of the peer source: the references it
// lists, and when each left the required set. The required images feed it
// (update, after each judgment) and each pass takes its references
// (forPass).
type peerSource struct {
	path          string        // the list's file; "" when the agent keeps none
	pull          bool          // Config.PullRequired
	grace         time.Duration // Config.PeerGrace
	insecurePerms bool
	clock         Clock
	log           *slog.Logger
	due           chan time.Time // when the next grace ends: the required images are judged again

	mu     sync.Mutex
	loaded bool
	refs   []string             // as written, sorted
	left   map[string]time.Time // ref → when it left the set; absent while in it
}

func newPeerSource(cfg Config, clock Clock, log *slog.Logger) *peerSource {
	return &peerSource{path: cfg.PeerList, pull: cfg.PullRequired, grace: cfg.PeerGrace, insecurePerms: cfg.InsecurePerms,
		clock: clock, log: log, due: make(chan time.Time, 1)}
}

// pulledFromPeers says whether a required image in state st is one the
// node should pull from its peers and keep: it lacks it, holds it at other
// digests only, or holds it unpinned.
func pulledFromPeers(st report.State) bool {
	return st == report.Missing || st == report.Mismatch || st == report.Present
}

// inSet is the references of set the peer source pulls: none without
// PullRequired or before a reporter sent a set.
func (p *peerSource) inSet(set *report.RequiredSet) map[string]bool {
	in := map[string]bool{}
	if p.pull && set != nil {
		for _, img := range set.Images {
			in[img.Ref] = true
		}
	}
	return in
}

// update brings the peer list in line with the required set as just
// judged (states by reference) and writes it when it changed. It returns
// when the next reference's grace ends (zero if none is waiting).
func (p *peerSource) update(set *report.RequiredSet, states map[string]report.State) time.Time {
	if p.path == "" {
		return time.Time{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.loadLocked() {
		return time.Time{}
	}
	now := p.clock.Now()
	inSet := p.inSet(set)
	next := map[string]bool{}
	for _, ref := range p.refs {
		if inSet[ref] {
			delete(p.left, ref)
			next[ref] = true
			continue
		}
		since, ok := p.left[ref]
		if !ok {
			since = now
			p.left[ref] = now
		}
		if now.Sub(since) < p.grace {
			next[ref] = true
		} else {
			delete(p.left, ref)
			p.log.Info("released from the peer list: no workload on this node needs it", "ref", ref, "since", since)
		}
	}
	for ref := range inSet {
		if !next[ref] && pulledFromPeers(states[ref]) {
			next[ref] = true
			p.log.Info("pulling from peers: a workload on this node needs it", "ref", ref, "state", states[ref])
		}
	}
	p.writeLocked(next)
	var due time.Time
	for _, since := range p.left {
		if end := since.Add(p.grace); due.IsZero() || end.Before(due) {
			due = end
		}
	}
	return due
}

// writeLocked makes next the list, and writes it when it changed; what the
// list holds stays first, so that a full list never drops what it pulled for
// something new.
func (p *peerSource) writeLocked(next map[string]bool) {
	refs := make([]string, 0, len(next))
	for _, ref := range p.refs {
		if next[ref] {
			refs = append(refs, ref)
			delete(next, ref)
		}
	}
	refs = append(refs, slices.Sorted(maps.Keys(next))...)
	if len(refs) > maxPeerRefs {
		p.log.Warn("the peer list is full: the other images are not pulled from peers", "listed", maxPeerRefs, "left out", len(refs)-maxPeerRefs)
		refs = refs[:maxPeerRefs]
	}
	slices.Sort(refs)
	if slices.Equal(refs, p.refs) {
		p.restoreFileLocked()
		return
	}
	if err := writePeerList(p.path, refs); err != nil {
		p.log.Error("writing the peer list", "path", p.path, "error", err)
	} else {
		p.refs = refs
	}
}

// loadLocked reads the peer list the agent wrote last, once: false while it
// cannot. Written anew, it would drop at once what it holds: it stays as it
// is (the pass reads its file, a list of kind peers, and keeps an unreadable
// list's pins too), and is read again at the next judgment or pass.
func (p *peerSource) loadLocked() bool {
	if p.loaded {
		return true
	}
	path := p.path
	refs, err := readPeerList(path)
	if err == nil && !p.insecurePerms {
		err = files.CheckPerms("peer list", path, os.Geteuid())
	}
	if err != nil {
		p.log.Warn("reading the peer list; it stays as it is", "path", path, "error", err)
		return false
	}
	p.refs, p.left, p.loaded = refs, map[string]time.Time{}, true
	return true
}

// restoreFileLocked writes the agent's peer list back over its file when the
// file says anything else (an edit by hand). The list is loaded.
func (p *peerSource) restoreFileLocked() {
	path := p.path
	want := peerListText(p.refs)
	got, err := readBounded(path, int64(len(want))+1)
	switch {
	case errors.Is(err, fs.ErrNotExist) && len(p.refs) == 0:
		return
	case err == nil && len(p.refs) > 0 && bytes.Equal(got, want):
		return
	}
	p.log.Warn("the peer list's file differs from the agent's list (edited by hand?); writing the agent's back", "path", path)
	if err := writePeerList(path, p.refs); err != nil {
		p.log.Error("writing the peer list", "path", path, "error", err)
	}
}

// readBounded reads up to limit bytes of the file at path.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

// forPass gives a pass the peer source's references, after writing the
// agent's list back over its file if someone edited it; those set does not
// name are only kept.
func (p *peerSource) forPass(set *report.RequiredSet) pass.PeerRefs {
	if p.path == "" {
		return pass.PeerRefs{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.loadLocked() {
		return pass.PeerRefs{}
	}
	p.restoreFileLocked()
	inSet := p.inSet(set)
	out := pass.PeerRefs{Known: true, Keep: map[string]bool{}}
	for i, ref := range p.refs {
		out.Entries = append(out.Entries, source.PullEntry{Ref: ref, Line: peerHeaderLines + i + 1})
		if !inSet[ref] {
			out.Keep[ref] = true
		}
	}
	return out
}

// listed says whether ref is on the peer list as last written.
func (p *peerSource) listed(ref string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := slices.BinarySearch(p.refs, ref)
	return ok
}

// readPeerList reads the references of the peer list at path; none if it
// does not exist.
func readPeerList(path string) ([]string, error) {
	l, err := source.ReadPeerList(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	refs := make([]string, 0, len(l.Entries))
	for _, e := range l.Entries {
		refs = append(refs, e.Ref)
	}
	slices.Sort(refs)
	return refs, nil
}

// writePeerList replaces the peer list at path with refs, or removes it
// when there are none.
func writePeerList(path string, refs []string) error {
	if len(refs) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return files.WriteFile(path, peerListText(refs), 0o644)
}

// peerHeaderLines is how many lines come before the first reference in the
// peer list's file.
const peerHeaderLines = 2

// peerListText is the peer list's file as the agent writes it.
func peerListText(refs []string) []byte {
	var b strings.Builder
	b.WriteString("# The images this node's workloads need, pulled from its peers and kept (holdfast run\n")
	b.WriteString("# --pull-required). The agent writes this file: edits are not obeyed, and overwritten.\n")
	for _, ref := range refs {
		fmt.Fprintln(&b, ref)
	}
	return []byte(b.String())
}

// schedule has the required images judged again when due (the next grace
// to end); nothing when zero.
func (p *peerSource) schedule(due time.Time) {
	if due.IsZero() {
		return
	}
	for {
		select {
		case p.due <- due:
			return
		default:
		}
		select {
		case old := <-p.due: // keep the earlier of the two
			if old.Before(due) {
				due = old
			}
		default:
		}
	}
}

// graceDue receives when the next grace ends (schedule).
func (p *peerSource) graceDue() <-chan time.Time { return p.due }
