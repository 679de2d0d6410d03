package containerd

import (
	"context"
	"encoding/json"
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
	conn, err := r.criConn()
	if err != nil {
		return nil, err
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

// SandboxImage is the pod sandbox (pause) image containerd's CRI runs every
// pod with, as its verbose status reports its config (containerd 1.x:
// sandboxImage); "" when it does not say (containerd 2.x keeps it in its
// images plugin's config, which the CRI's status leaves out).
func (r *Runtime) SandboxImage(ctx context.Context) (string, error) {
	conn, err := r.criConn()
	if err != nil {
		return "", err
	}
	resp, err := runtimeapi.NewRuntimeServiceClient(conn).Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if status.Code(err) == codes.Unimplemented {
		return "", fmt.Errorf("%w: %v", runtime.ErrNoCRI, err)
	}
	if err != nil {
		return "", fmt.Errorf("asking the CRI for its status: %w", err)
	}
	var cfg struct {
		SandboxImage string            `json:"sandboxImage"`
		PinnedImages map[string]string `json:"pinned_images"`
	}
	if raw := resp.GetInfo()["config"]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
			return "", fmt.Errorf("reading the CRI's config: %w", err)
		}
	}
	if cfg.SandboxImage != "" {
		return cfg.SandboxImage, nil
	}
	return cfg.PinnedImages["sandbox"], nil
}

// criConn is the connection to containerd's CRI: its socket is containerd's
// own, and the CRI works in the k8s.io namespace only.
func (r *Runtime) criConn() (*grpc.ClientConn, error) {
	if r.namespace != criNamespace {
		return nil, fmt.Errorf("namespace %s: %w (the CRI works in %s only)", r.namespace, runtime.ErrNoCRI, criNamespace)
	}
	conn, ok := r.client.Conn().(*grpc.ClientConn)
	if !ok {
		return nil, fmt.Errorf("asking the CRI: not a gRPC connection")
	}
	return conn, nil
}
