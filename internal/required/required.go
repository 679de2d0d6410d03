// Package required holds the wire types of the set of images a node's
// workloads need: the reporter sends the set to the agent (PUT /required),
// and the agent says in its GET /report where each image stands on the node
// and in GET /held what the node holds; the reporter writes both to the
// node's NodeImages object, which holdfast check --cluster reads.
package required

// Image is an image the node's workloads need, and who uses it:
// "Deployment shop/web containers/web".
type Image struct {
	Ref    string   `json:"ref"`
	UsedBy []string `json:"usedBy,omitempty"`
}

// Set is the body of PUT /required: the images, sorted by reference.
type Set struct {
	Images []Image `json:"images"`
}

// Verdict is an image of the set and where it stands on the node: pinned, present, missing or mismatch.
type Verdict struct {
	Image
	State string `json:"state"`
}

// Report is what the agent's GET /report says of the set (journal.Report.Required).
type Report struct {
	Known    bool           `json:"known"`              // the agent has a set (a reporter sent one since the agent started)
	Ready    bool           `json:"ready"`              // every image of the set is pinned
	Counts   map[string]int `json:"counts"`             // by state
	NotReady []Verdict      `json:"notReady,omitempty"` // the images not pinned, sorted by ref
	// HeldHash is the Hash of what the node holds (GET /held), as of the
	// last judgment; it changes when that does.
	HeldHash string `json:"heldHash,omitempty"`
}
