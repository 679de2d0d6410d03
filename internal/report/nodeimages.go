package report

import "time"

// The NodeImages resource: one per node, cluster-scoped and named as the
// node, written by the node's reporter (server-side apply) and read by
// holdfast check --cluster. Its CustomResourceDefinition comes with the Helm
// chart; the Node owns it, so that it goes with the Node.
const (
	Group          = "holdfast.io"
	Version        = "v1alpha1"
	APIVersion     = Group + "/" + Version
	Kind           = "NodeImages"
	Resource       = "nodeimages"
	NodeImagesPath = "/apis/" + APIVersion + "/" + Resource
)

// Bounds on what a NodeImages object says of the required images: the
// counts stay whole, the list of images not ready and their users are cut.
const (
	MaxNotReady = 1000
	MaxUsedBy   = 3
)

// ImagesConditionType is the Node condition the reporter keeps from the
// agent's Required: whether the node holds, pinned, the images its
// workloads need. check --cluster shows it for a node without a report.
const ImagesConditionType = "HoldfastImagesReady"

// NodeImages is what one node holds, and where the images its workloads
// need stand there.
type NodeImages struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   ObjectMeta `json:"metadata"`
	// Updated is when the reporter wrote it.
	Updated time.Time `json:"updated"`
	// Images and Pinned count the image records the node holds, and the
	// pinned ones among them (the CRI's own sha256: records left out).
	Images int `json:"images"`
	Pinned int `json:"pinned"`
	// HeldHash is Held.Hash of what Held packs.
	HeldHash string `json:"heldHash"`
	// Held is Held.Pack: gzipped lines (base64 in JSON).
	Held []byte `json:"held"`
	// Required is the agent's report on the images the node's workloads
	// need, its list cut to MaxNotReady images of MaxUsedBy users each.
	Required *Required `json:"required,omitempty"`
	// Sets is the agent's Report.Sets: where each ImageSet's images stand
	// on the node.
	Sets []SetState `json:"sets,omitempty"`
	// PeerMirror is the agent's Report.PeerMirror.
	PeerMirror string `json:"peerMirror,omitempty"`
}

// ObjectMeta is what holdfast writes and reads of an object's metadata.
type ObjectMeta struct {
	Name            string            `json:"name"`
	UID             string            `json:"uid,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	OwnerReferences []OwnerReference  `json:"ownerReferences,omitempty"`
}

// OwnerReference names an object's owner.
type OwnerReference struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
}

// Cut is r with its list of images not ready cut to MaxNotReady, and each
// image's users to MaxUsedBy.
func (r Required) Cut() Required {
	if len(r.NotReady) > MaxNotReady {
		r.NotReady = r.NotReady[:MaxNotReady]
	}
	out := make(Rows, len(r.NotReady))
	for i, v := range r.NotReady {
		if len(v.UsedBy) > MaxUsedBy {
			v.UsedBy = v.UsedBy[:MaxUsedBy]
		}
		out[i] = v
	}
	r.NotReady = out
	return r
}
