package report

// RequiredImage is an image the node's workloads need, and who uses it:
// "Deployment shop/web containers/web".
type RequiredImage struct {
	Ref    string   `json:"ref"`
	UsedBy []string `json:"usedBy,omitempty"`
}

// RequiredSet is the body of PUT /required: the images the node's
// workloads need, sorted by reference.
type RequiredSet struct {
	Images []RequiredImage `json:"images"`
}

// Required is what the agent's GET /report says of the set (Report.Required).
type Required struct {
	Known    bool          `json:"known"`              // the agent has a set (a reporter sent one since the agent started)
	Ready    bool          `json:"ready"`              // every image of the set is pinned
	Counts   map[State]int `json:"counts"`             // by state
	NotReady Rows          `json:"notReady,omitempty"` // the images not pinned, sorted by ref
	Pulling  int           `json:"pulling,omitempty"`  // of those, the ones being pulled from peers
	// HeldHash is the Hash of what the node holds (GET /held), as of the
	// last judgment; it changes when that does.
	HeldHash string `json:"heldHash,omitempty"`
}
