// Package report holds every type that passes between the agent, its
// reporter and holdfast check --cluster, and their encodings: the agent's
// GET /report (Report, its Events and Failures, and Required: where the
// images the node's workloads need stand), the set the reporter sends in
// PUT /required (RequiredSet), what the node holds (Held, GET /held's text
// and its packed form), and the node's NodeImages object the reporter writes
// and check --cluster reads; and the one row of an image on a node (Image)
// that holdfast check, check --cluster and the agent's report all give. It
// imports nothing but the standard library: the node binary, the reporter
// and the CLI all link it.
package report

import "time"

// Event is one thing that happened on the node that an operator should hear
// of; the reporter puts it on the Node as a Kubernetes Event of the same
// type (Normal, Warning), reason and message.
type Event struct {
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
}

// Failure is a source that is failing, and why. Source is empty for a
// failure that names no source (an images dir that cannot be read, a store
// that cannot be listed): Error then says what failed.
type Failure struct {
	Source string `json:"source"`
	Error  string `json:"error"`
}

// Report is what the agent's GET /report returns.
type Report struct {
	Ready       bool      `json:"ready"`
	Pinned      int       `json:"pinned"` // images (names other than name@digest) pinned
	Sources     int       `json:"sources"`
	Failing     []Failure `json:"failing"`
	HealBackoff []string  `json:"healBackoff"`
	Events      []Event   `json:"events"`
	// Required is where the images the node's workloads need stand (the
	// set a reporter sent); nil from a journal's own Report.
	Required *Required `json:"required,omitempty"`
	// Sets is where the images of the ImageSets the reporter sent (PUT
	// /sets) stand on the node, sorted by name; nil before it sent any.
	Sets []SetState `json:"sets,omitempty"`
	// PeerMirror is the node's peer mirror as its peers reach it (holdfast
	// run --peer-mirror: its spegel at the node's address), where the
	// other nodes fetch what this node holds of a set; "" without one.
	PeerMirror string `json:"peerMirror,omitempty"`
	// Next is the sequence number the next event will get: a reader that
	// has seen every event up to now asks with after=Next-1.
	Next uint64 `json:"next"`
	// Started is when the agent's journal began (the agent process
	// started): a reader whose cursor came from another journal starts
	// from 0.
	Started time.Time `json:"started"`
}
