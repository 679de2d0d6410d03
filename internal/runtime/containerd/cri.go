package containerd

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// criNamespace is the only namespace containerd's CRI plugin works in.
const criNamespace = "k8s.io"

// CRIImages asks the CRI image service on containerd's own socket about each
// name, as the kubelet would (ImageStatus). The CRI learns of records from
// containerd's events, so what it reports may lag a record by a moment.
func (r *Runtime) CRIImages(ctx context.Context, names []string) (map[string]runtime.CRIImage, error) {
	if r.namespace != criNamespace {
		return nil, fmt.Errorf("namespace %s: %w (the CRI works in %s only)", r.namespace, runtime.ErrNoCRI, criNamespace)
	}
	conn, ok := r.client.Conn().(*grpc.ClientConn)
	if !ok {
		return nil, fmt.Errorf("asking the CRI: not a gRPC connection")
	}
	cri := runtimeapi.NewImageServiceClient(conn)
	out := make(map[string]runtime.CRIImage, len(names))
	for _, name := range names {
		resp, err := cri.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: name}})
		switch status.Code(err) {
		case codes.OK:
		case codes.Unimplemented:
			// containerd answers, but without the CRI plugin (disabled in
			// its config, or a build without it).
			return nil, fmt.Errorf("%w: %v", runtime.ErrNoCRI, err)
		case codes.NotFound, codes.InvalidArgument:
			// A name the CRI cannot parse is one it does not see.
			out[name] = runtime.CRIImage{}
			continue
		default:
			return nil, fmt.Errorf("asking the CRI about %s: %w", name, err)
		}
		if img := resp.GetImage(); img != nil {
			out[name] = runtime.CRIImage{Seen: true, Pinned: img.Pinned}
		} else {
			out[name] = runtime.CRIImage{}
		}
	}
	return out, nil
}
