package pass

import (
	"context"
	"errors"
	"fmt"

	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
)

// StatusCRI is the CRI's side of `status -o json`: whether there is a CRI
// image service to ask, and whether it reports pins to the kubelet.
type StatusCRI struct {
	Available    bool   `json:"available"`
	PinsReported bool   `json:"pinsReported"` // containerd >= 1.7.10 or 1.6.25
	Note         string `json:"note,omitempty"`
}

// addCRI asks the CRI image service about every image of st, as the kubelet
// would, and says once what the CRI cannot do here. A CRI that does not answer
// leaves the images without a CRI view, with a note saying why.
func addCRI(ctx context.Context, rt hfruntime.Runtime, namespace string, st *Status) {
	names := make([]string, len(st.Images))
	for i, img := range st.Images {
		names[i] = img.Name
	}
	views, err := rt.CRIImages(ctx, names)
	switch {
	case errors.Is(err, hfruntime.ErrNoCRI):
		st.CRI.Note = fmt.Sprintf("no CRI: namespace %s has no CRI image service (containerd's CRI works in k8s.io only, and only with its CRI plugin); no kubelet reads these pins", namespace)
		return
	case err != nil:
		st.CRI.Note = err.Error()
		return
	}
	st.CRI.Available = true
	for i := range st.Images {
		v := views[st.Images[i].Name]
		st.Images[i].CRI = &v
	}
	info, err := rt.Server(ctx)
	if err != nil {
		st.CRI.Note = err.Error()
		return
	}
	st.CRI.PinsReported = hfruntime.CRIHonoursPins(info.Version)
	if !st.CRI.PinsReported {
		st.CRI.Note = fmt.Sprintf("containerd %s does not report pins through its CRI (needs 1.7.10 or 1.6.25): the kubelet cannot see pins here; holdfast's heal restores deleted images", info.Version)
	}
}
