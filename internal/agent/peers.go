package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/holdfast-project/holdfast/internal/datadir"
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

// PeerListName is the file name of the peer source in its directory.
const PeerListName = "required.txt"

// DefaultPeerGrace is how long an image that left the required set stays on
// the peer list.
const DefaultPeerGrace = 10 * time.Minute

// maxPeerRefs bounds the peer list well within what a pull list may hold
// (source.MaxListLines, source.MaxListBytes).
const maxPeerRefs = 10_000

// peerList is what the agent keeps of the peer source: the references it
// lists, and when each left the required set.
type peerList struct {
	loaded bool
	refs   []string             // as written, sorted
	left   map[string]time.Time // ref → when it left the set; absent while in it
}

// pulledFromPeers says whether a required image in state st is one the
// node should pull from its peers and keep: it lacks it, holds it at other
// digests only, or holds it unpinned.
func pulledFromPeers(st report.State) bool {
	return st == report.Missing || st == report.Mismatch || st == report.Present
}

// updatePeers brings the peer list in line with the required set as just
// judged (states by reference) and writes it when it changed. It returns
// when the next reference's grace ends (zero if none is waiting).
func (a *Agent) updatePeers(set *report.RequiredSet, states map[string]report.State) time.Time {
	path := a.cfg.PeerList
	if path == "" {
		return time.Time{}
	}
	p := &a.peers
	if !a.loadPeers() {
		return time.Time{}
	}
	now := a.clock.Now()
	inSet := map[string]bool{}
	if a.cfg.PullRequired && set != nil {
		for _, img := range set.Images {
			inSet[img.Ref] = true
		}
	}
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
		if now.Sub(since) < a.cfg.PeerGrace {
			next[ref] = true
		} else {
			delete(p.left, ref)
			a.log.Info("released from the peer list: no workload on this node needs it", "ref", ref, "since", since)
		}
	}
	for ref := range inSet {
		if !next[ref] && pulledFromPeers(states[ref]) {
			next[ref] = true
			a.log.Info("pulling from peers: a workload on this node needs it", "ref", ref, "state", states[ref])
		}
	}
	// What the list holds stays first, so that a full list never drops what
	// it pulled for something new.
	refs := make([]string, 0, len(next))
	for _, ref := range p.refs {
		if next[ref] {
			refs = append(refs, ref)
			delete(next, ref)
		}
	}
	refs = append(refs, slices.Sorted(maps.Keys(next))...)
	if len(refs) > maxPeerRefs {
		a.log.Warn("the peer list is full: the other images are not pulled from peers", "listed", maxPeerRefs, "left out", len(refs)-maxPeerRefs)
		refs = refs[:maxPeerRefs]
	}
	slices.Sort(refs)
	if !slices.Equal(refs, p.refs) {
		if err := writePeerList(path, refs); err != nil {
			a.log.Error("writing the peer list", "path", path, "error", err)
		} else {
			p.refs = refs
		}
	} else {
		a.restorePeerFile()
	}
	var due time.Time
	for _, since := range p.left {
		if end := since.Add(a.cfg.PeerGrace); due.IsZero() || end.Before(due) {
			due = end
		}
	}
	return due
}

// loadPeers reads the peer list the agent wrote last, once: false while it
// cannot. Written anew, it would drop at once what it holds: it stays as it
// is (the pass reads it as any pull list, and keeps an unreadable list's
// pins too), and is read again at the next judgment or pass. Call with
// reqJudge held.
func (a *Agent) loadPeers() bool {
	p := &a.peers
	if p.loaded {
		return true
	}
	path := a.cfg.PeerList
	refs, err := readPeerList(path)
	if err == nil && !a.cfg.InsecurePerms {
		err = source.CheckPerms("peer list", path, os.Geteuid())
	}
	if err != nil {
		a.log.Warn("reading the peer list; it stays as it is", "path", path, "error", err)
		return false
	}
	p.refs, p.left, p.loaded = refs, map[string]time.Time{}, true
	return true
}

// restorePeerFile writes the agent's peer list back over its file when the
// file says anything else (an edit by hand). Call with reqJudge held, the
// list loaded.
func (a *Agent) restorePeerFile() {
	path := a.cfg.PeerList
	want := peerListText(a.peers.refs)
	got, err := readBounded(path, int64(len(want))+1)
	switch {
	case errors.Is(err, fs.ErrNotExist) && len(a.peers.refs) == 0:
		return
	case err == nil && len(a.peers.refs) > 0 && bytes.Equal(got, want):
		return
	}
	a.log.Warn("the peer list's file differs from the agent's list (edited by hand?); writing the agent's back", "path", path)
	if err := writePeerList(path, a.peers.refs); err != nil {
		a.log.Error("writing the peer list", "path", path, "error", err)
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

// Peers gives a pass the peer source's references (pass.Handoff), after
// writing the agent's list back over its file if someone edited it. Those
// the required set does not name (in their grace period; all of them
// before a reporter sent a set) are only kept.
func (a *Agent) Peers() pass.PeerRefs {
	if a.cfg.PeerList == "" {
		return pass.PeerRefs{}
	}
	a.reqJudge.Lock()
	defer a.reqJudge.Unlock()
	if !a.loadPeers() {
		return pass.PeerRefs{}
	}
	a.restorePeerFile()
	inSet := map[string]bool{}
	a.mu.Lock()
	if a.cfg.PullRequired && a.req.set != nil {
		for _, img := range a.req.set.Images {
			inSet[img.Ref] = true
		}
	}
	a.mu.Unlock()
	out := pass.PeerRefs{Known: true, Keep: map[string]bool{}}
	for i, ref := range a.peers.refs {
		out.Entries = append(out.Entries, source.PullEntry{Ref: ref, Line: peerHeaderLines + i + 1})
		if !inSet[ref] {
			out.Keep[ref] = true
		}
	}
	return out
}

// onPeerList says whether ref is on the peer list as last written.
func (a *Agent) onPeerList(ref string) bool {
	_, ok := slices.BinarySearch(a.peers.refs, ref)
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
	return datadir.WriteFileAtomic(path, peerListText(refs), 0o644)
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

// schedulePeers has the loop judge the required set again when due (the
// next grace to end); nothing when zero.
func (a *Agent) schedulePeers(due time.Time) {
	if due.IsZero() {
		return
	}
	for {
		select {
		case a.peerDue <- due:
			return
		default:
		}
		select {
		case old := <-a.peerDue: // keep the earlier of the two
			if old.Before(due) {
				due = old
			}
		default:
		}
	}
}
