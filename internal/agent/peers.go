package agent

import (
	"log/slog"
	"sync"
	"time"

	"github.com/holdfast-project/holdfast/internal/pass"
	"github.com/holdfast-project/holdfast/internal/report"
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
	pull  bool          // Config.PullRequired
	grace time.Duration // Config.PeerGrace
	clock Clock
	log   *slog.Logger
	due   chan time.Time // when the next grace ends: the required images are judged again

	mu   sync.Mutex
	list ownList // its path "" when the agent keeps none
}

func newPeerSource(cfg Config, clock Clock, log *slog.Logger) *peerSource {
	return &peerSource{pull: cfg.PullRequired, grace: cfg.PeerGrace, clock: clock, log: log, due: make(chan time.Time, 1),
		list: ownList{path: cfg.PeerList, what: "peer list", header: peerHeader, max: maxPeerRefs, insecurePerms: cfg.InsecurePerms, log: log}}
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
	if p.list.path == "" {
		return time.Time{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.list.load() {
		return time.Time{}
	}
	inSet := p.inSet(set)
	next := p.list.age(inSet, p.clock.Now(), p.grace, "no workload on this node needs it")
	for ref := range inSet {
		if !next[ref] && pulledFromPeers(states[ref]) {
			next[ref] = true
			p.log.Info("pulling from peers: a workload on this node needs it", "ref", ref, "state", states[ref])
		}
	}
	p.list.write(next)
	return p.list.due(p.grace)
}

// forPass gives a pass the peer source's references, after writing the
// agent's list back over its file if someone edited it; those set does not
// name are only kept. ok is false when the agent keeps no peer list.
func (p *peerSource) forPass(set *report.RequiredSet) (_ pass.PeerRefs, ok bool) {
	if p.list.path == "" {
		return pass.PeerRefs{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.list.load() {
		return pass.PeerRefs{}, true
	}
	return p.list.forPass(p.inSet(set)), true
}

// listed says whether ref is on the peer list as last written.
func (p *peerSource) listed(ref string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.list.listed(ref)
}

// writePeerList replaces the peer list at path with refs, or removes it
// when there are none.
func writePeerList(path string, refs []string) error { return writeList(path, peerHeader, refs, false) }

// peerHeader starts the peer list's file.
const peerHeader = `# The images this node's workloads need, pulled from its peers and kept (holdfast run
# --pull-required). The agent writes this file: edits are not obeyed, and overwritten.
`

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
