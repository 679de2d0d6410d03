package reporter

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/holdfast-project/holdfast/internal/report"
)

// FieldManager is the reporter's name in the server-side applies of the
// NodeImages objects.
const FieldManager = "holdfast-reporter"

// Apply applies body (JSON) to the object at path by server-side apply.
type Apply func(ctx context.Context, path string, body []byte) error

// applyThrough is server-side apply through client; nil when client cannot
// (a fake clientset has no REST client).
func applyThrough(client kubernetes.Interface) Apply {
	rc, ok := client.CoreV1().RESTClient().(*rest.RESTClient)
	if !ok || rc == nil {
		return nil
	}
	return func(ctx context.Context, path string, body []byte) error {
		return rc.Patch(types.ApplyPatchType).AbsPath(path).Param("fieldManager", FieldManager).Param("force", "true").
			Body(body).Do(ctx).Error()
	}
}

// nodeImages keeps the node's NodeImages object in line with the agent:
// what the node holds (GET /held, read again only when its hash moves) and
// the report on the required images. It writes only what changed.
type nodeImages struct {
	apply   Apply
	held    report.Held
	hash    string // of held
	written [32]byte
	failed  string // the last error logged, not to log it each round
}

// publish writes the NodeImages object for rep (the report's required
// part), sets (where the ImageSets' images stand) and the agent's peer
// mirror when they say something new. The Node's uid makes it the owner.
func (r *Reporter) publish(ctx context.Context, rep *report.Required, sets []report.SetState, peerMirror string) {
	p := r.images
	if p == nil || p.apply == nil || rep == nil || !rep.Known || r.uid == "" {
		return
	}
	if rep.HeldHash != p.hash {
		held, err := r.getHeld(ctx)
		if err != nil {
			r.publishFailed(err)
			return
		}
		p.held, p.hash = held, held.Hash()
	}
	cut := rep.Cut()
	cut.HeldHash = p.hash
	key, err := json.Marshal(cut)
	if err != nil {
		r.publishFailed(fmt.Errorf("encoding the report: %w", err))
		return
	}
	setsKey, err := json.Marshal(sets)
	if err != nil {
		r.publishFailed(fmt.Errorf("encoding the report's sets: %w", err))
		return
	}
	sum := sha256.Sum256(append(append(append(key, p.hash...), setsKey...), peerMirror...))
	if sum == p.written {
		return
	}
	obj := report.NodeImages{
		APIVersion: report.APIVersion,
		Kind:       report.Kind,
		Metadata: report.ObjectMeta{
			Name:            r.cfg.Node,
			Labels:          map[string]string{"app.kubernetes.io/managed-by": FieldManager},
			OwnerReferences: []report.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: r.cfg.Node, UID: string(r.uid)}},
		},
		Updated:    r.now().UTC().Truncate(1e9),
		Images:     len(p.held),
		HeldHash:   p.hash,
		Held:       p.held.Pack(),
		Required:   &cut,
		Sets:       sets,
		PeerMirror: peerMirror,
	}
	for _, h := range p.held {
		if h.Pinned {
			obj.Pinned++
		}
	}
	body, err := json.Marshal(obj)
	if err != nil {
		r.publishFailed(fmt.Errorf("encoding NodeImages %s: %w", r.cfg.Node, err))
		return
	}
	if err := p.apply(ctx, report.NodeImagesPath+"/"+r.cfg.Node, body); err != nil {
		r.publishFailed(fmt.Errorf("applying NodeImages %s (%d bytes): %w", r.cfg.Node, len(body), err))
		return
	}
	if p.failed != "" {
		r.log.Info("writing the node's NodeImages again", "node", r.cfg.Node)
	}
	p.written, p.failed = sum, ""
	r.log.Debug("wrote NodeImages", "node", r.cfg.Node, "images", obj.Images, "pinned", obj.Pinned, "sets", len(sets), "bytes", len(body))
}

func (r *Reporter) publishFailed(err error) {
	if msg := err.Error(); msg != r.images.failed {
		r.images.failed = msg
		r.log.Warn("writing the node's NodeImages (holdfast check --cluster reads it); trying again with the next report", "node", r.cfg.Node, "error", err)
	}
}
