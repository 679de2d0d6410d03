// Package imageset is the ImageSet resource: a cluster-scoped list of images
// that must be on the selected nodes before any workload names them.
//
// Each selected node's agent pulls the set's images through its peers, pins
// them, and says in its NodeImages where each image stands; it starts a pull
// only when MayPull allows it, a rule every node applies to the same inputs
// so that new images spread in waves without the nodes talking. One leader
// among the reporters turns the selected nodes' states into the set's
// status with Aggregate, and writes it only when it differs from the last.
package imageset

import (
	"time"

	"github.com/holdfast-project/holdfast/internal/report"
)

// The ImageSet resource, of the NodeImages group and version.
const (
	Kind     = "ImageSet"
	Resource = "imagesets"
	Path     = "/apis/" + report.APIVersion + "/" + Resource
)

// DefaultMaxConcurrent is how many nodes pull one image at once when the
// spec says 0. Up to 128 nodes it never binds (the holders double each wave,
// so at most half the nodes pull at once); beyond, it keeps what crosses the
// fabric for one image to 64 pulls, 12.8 Gbit/s on 200 Mbit/s links, about
// what one uplink carries, at the cost of ⌈N/64⌉ waves after the sixth.
const DefaultMaxConcurrent = 64

// Bounds on what a status lists: the counts stay whole, the lists are cut.
const (
	MaxMissing      = 100 // images in Status.Missing
	MaxMissingNodes = 10  // node names per missing image
	MaxFailures     = 100 // entries in Status.Failures
	MaxErrorLen     = 512 // bytes of one failure's error
)

// Condition types, and their statuses.
const (
	Staged      = "Staged"
	Progressing = "Progressing"

	True    = "True"
	False   = "False"
	Unknown = "Unknown"
)

// ImageSet is a set of images to stage on the nodes a selector picks.
type ImageSet struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   Meta   `json:"metadata"`
	Spec       Spec   `json:"spec"`
	Status     Status `json:"status,omitzero"`
}

// Meta is the object's metadata and its generation, which the API server
// raises on each change of the spec.
type Meta struct {
	report.ObjectMeta
	Generation int64 `json:"generation,omitempty"`
}

// Spec is what the set asks for.
type Spec struct {
	// Images are the references to stage.
	Images []string `json:"images"`
	// NodeSelector picks the nodes by label; empty, every node the
	// DaemonSet runs on.
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// MaxConcurrent is the most nodes pulling one image at once; 0 means
	// DefaultMaxConcurrent.
	MaxConcurrent int `json:"maxConcurrent,omitempty"`
}

// Selects reports whether a node of these labels is one the set picks.
func (s Spec) Selects(labels map[string]string) bool {
	for k, v := range s.NodeSelector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Concurrency is MaxConcurrent with its default.
func (s Spec) Concurrency() int {
	if s.MaxConcurrent <= 0 {
		return DefaultMaxConcurrent
	}
	return s.MaxConcurrent
}

// Status is where the set stands, as the leader last wrote it.
type Status struct {
	Conditions []Condition `json:"conditions,omitempty"`
	Nodes      NodeCounts  `json:"nodes"`
	// MissingImages counts the images some selected node lacks; Missing
	// lists the first MaxMissing of them, sorted by image.
	MissingImages int            `json:"missingImages"`
	Missing       []MissingImage `json:"missing,omitempty"`
	// FailureCount counts the failed pulls; Failures lists the first
	// MaxFailures, sorted by node then image.
	FailureCount int       `json:"failureCount,omitempty"`
	Failures     []Failure `json:"failures,omitempty"`
}

// Condition is a condition of the Kubernetes shape.
type Condition struct {
	Type               string    `json:"type"`
	Status             string    `json:"status"`
	Reason             string    `json:"reason"`
	Message            string    `json:"message"`
	LastTransitionTime time.Time `json:"lastTransitionTime"`
	ObservedGeneration int64     `json:"observedGeneration,omitempty"`
}

// NodeCounts counts the selected nodes, those holding every image pinned,
// and those with a failed pull.
type NodeCounts struct {
	Selected int `json:"selected"`
	Staged   int `json:"staged"`
	Failed   int `json:"failed"`
}

// MissingImage is an image some selected nodes lack: on how many, and the
// first MaxMissingNodes of them, sorted.
type MissingImage struct {
	Image     string   `json:"image"`
	Nodes     int      `json:"nodes"`
	NodeNames []string `json:"nodeNames,omitempty"`
}

// Failure is a node's failed pull of an image, and since when it fails.
type Failure struct {
	Node  string    `json:"node"`
	Image string    `json:"image"`
	Error string    `json:"error"`
	Since time.Time `json:"since"`
}

// Phase is where one image stands on one node, as its agent says
// (report.SetPhase); the zero Phase, like Waiting, is nothing yet.
type Phase = report.SetPhase

// The phases a node reports of an image.
const (
	Held    = report.SetHeld // pinned
	Pulling = report.SetPulling
	Failed  = report.SetFailed
	Waiting = report.SetWaiting
)

// ImageState is one image on one node.
type ImageState struct {
	Phase Phase
	Error string    // of a failed pull
	Since time.Time // when the pull began failing
	From  string    // the peer mirror its pull was sent to
}

// NodeState is what the leader learns of one selected node: the state of
// each image of the set, by reference (an image absent is nothing yet).
type NodeState struct {
	Node   string
	Images map[string]ImageState
}
