package runtime

import "errors"

// CRIImage is what the CRI image service (what the kubelet asks) reports about
// one image name.
type CRIImage struct {
	Seen   bool `json:"seen"`   // the CRI knows the image by this name
	Pinned bool `json:"pinned"` // and reports it pinned, so the kubelet's image GC keeps it
}

// ErrNoCRI says the store has no CRI image service for holdfast's namespace:
// the namespace is not k8s.io, or containerd runs without its CRI plugin.
// Nothing then reads pins for the kubelet, and nothing is to be waited for.
var ErrNoCRI = errors.New("no CRI image service")
