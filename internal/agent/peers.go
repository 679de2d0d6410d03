package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/holdfast-project/holdfast/internal/datadir"
	"github.com/holdfast-project/holdfast/internal/report"
	"github.com/holdfast-project/holdfast/internal/source"
)

// The peer source (holdfast run --pull-required): a pull list the agent
// writes, <data-dir>/peers/required.txt, naming each image of the node's
// required set that the node lacked (or held unpinned) when it was judged.
// The pass pulls what it names through the node's registry mirrors (spegel
// serves what a peer holds), pins and leases it like any pull list's; an
// image that leaves the required set stays listed for the grace period, so
// that a workload moving away and back does not release it, then its line
// goes and the pass releases it. Nothing another source wants is unpinned:
// the pass unpins only what no source wants.

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
	if !p.loaded {
		refs, err := readPeerList(path)
		if err != nil {
			// Written anew, it would drop at once what it holds: it stays as
			// it is (the pass keeps an unreadable list's pins too), and is
			// read again at the next judgment.
			a.log.Warn("reading the peer list; it stays as it is", "path", path, "error", err)
			return time.Time{}
		}
		p.refs, p.left, p.loaded = refs, map[string]time.Time{}, true
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
	}
	var due time.Time
	for _, since := range p.left {
		if end := since.Add(a.cfg.PeerGrace); due.IsZero() || end.Before(due) {
			due = end
		}
	}
	return due
}

// onPeerList says whether ref is on the peer list as last written.
func (a *Agent) onPeerList(ref string) bool {
	_, ok := slices.BinarySearch(a.peers.refs, ref)
	return ok
}

// readPeerList reads the references of the peer list at path; none if it
// does not exist.
func readPeerList(path string) ([]string, error) {
	l, err := source.ReadPullList(path)
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
	var b strings.Builder
	b.WriteString("# The images this node's workloads need, pulled from its peers and kept (holdfast run\n")
	b.WriteString("# --pull-required). The agent writes this file: edits are overwritten.\n")
	for _, ref := range refs {
		fmt.Fprintln(&b, ref)
	}
	return datadir.WriteFileAtomic(path, []byte(b.String()), 0o644)
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
