package report

import "time"

// What passes between a node's reporter and its agent, and into the node's
// NodeImages, of the ImageSets (internal/imageset): the reporter hands the
// agent every set it knows in PUT /sets (StageSets), the agent says where
// each image of them stands on the node in its GET /report (Report.Sets),
// and the reporter writes that into NodeImages.Sets, which the other nodes'
// reporters read to pull in waves and the leader reads to write each set's
// status.

// Bounds on what the agent takes and says of the sets: a body over them is
// refused whole, and NodeImages lists no more.
const (
	MaxSets      = 100  // sets in one PUT /sets
	MaxSetImages = 1000 // images of one set
	MaxSetError  = 512  // bytes of one image's error
)

// StageSet is one ImageSet as the reporter hands it to the node's agent.
type StageSet struct {
	// Name is the ImageSet's name (a DNS subdomain name, as the API
	// server allows); the agent keeps the set as a source of that name.
	Name string `json:"name"`
	// Generation is the ImageSet's metadata.generation the reporter read:
	// the agent says it back in SetState, so that the leader counts only
	// what a node says of the spec as it is.
	Generation int64 `json:"generation"`
	// Selected says the set's node selector picks this node. The agent
	// keeps, pins and leases only the images of selected sets; of the
	// others it only says which it holds, for the waves (a holder serves
	// its peers whether selected or not).
	Selected bool `json:"selected"`
	// Images are the set's references.
	Images []string `json:"images"`
	// MayPull are those of Images the node may start pulling now (the
	// waves: imageset.MayPull). The agent keeps pulling, retrying with
	// backoff, every image it started; one it holds (any record of that
	// name) it keeps without pulling; the others wait.
	MayPull []string `json:"mayPull,omitempty"`
	// From is, for an image of MayPull, the peer mirror of the holder the
	// waves send the node to (imageset.Place; that node's
	// NodeImages.PeerMirror): the agent fetches the image's blobs there
	// first, asking the holder's mirror for what it holds itself, and
	// resolves the reference through its mirrors as always. Blobs are
	// checked against their digests, so a holder can only fail a fetch,
	// which then goes on through the node's mirrors.
	From map[string]string `json:"from,omitempty"`
}

// StageSets is the body of PUT /sets: every ImageSet the reporter knows
// (selected or not), sorted by name. A set absent from it is released
// after the grace period (the agent's --peer-grace), like an image that left
// the required set; an image that left a set likewise.
type StageSets struct {
	Sets []StageSet `json:"sets"`
}

// SetPhase is where one image of a set stands on a node.
type SetPhase string

// The phases of an image of a set on a node.
const (
	// SetHeld: a record of the name is pinned on the node (by the set's
	// source or any other).
	SetHeld SetPhase = "Held"
	// SetPulling: the node started pulling it and does not hold it yet.
	SetPulling SetPhase = "Pulling"
	// SetFailed: its last pull failed (or the policy refused it); the
	// node tries again with backoff. Error says why.
	SetFailed SetPhase = "Failed"
	// SetWaiting: the node has not started pulling it (the waves have
	// not let it yet).
	SetWaiting SetPhase = "Waiting"
)

// SetImage is one image of a set on a node. Ref is the reference as the
// set writes it or normalized (imageset finds it either way).
type SetImage struct {
	Ref   string   `json:"ref"`
	Phase SetPhase `json:"phase"`
	// Error is why its last pull failed, cut to MaxSetError bytes; Since
	// when its pulls fail (the first failure of this run of failures).
	Error string    `json:"error,omitempty"`
	Since time.Time `json:"since,omitzero"`
	// From is, for an image Pulling or Held since the node's list took it
	// to pull, the peer mirror the waves sent the node to
	// (StageSet.From): the holder that serves it, counted by the waves
	// (imageset.MaxServe). Empty for an image held before, and after the
	// agent restarts.
	From string `json:"from,omitempty"`
}

// SetState is where a set's images stand on a node: in the agent's report
// and in the node's NodeImages.
type SetState struct {
	Name       string `json:"name"`
	Generation int64  `json:"generation"`
	Selected   bool   `json:"selected"`
	// Images are, for a selected set, each of its images, sorted by
	// reference; for a set that does not select the node, only those it
	// holds (phase Held).
	Images []SetImage `json:"images,omitempty"`
}
