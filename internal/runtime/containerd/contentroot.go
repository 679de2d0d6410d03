package containerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// The content store's directory as holdfast sees it: found (from
// --content-root or containerd), proved to be containerd's, and checked for
// what direct writes need.

// ContentRootOff checks, now, the content store's directory as holdfast
// sees it, and returns why what needs it runs off: with --write-path=auto,
// direct writes (imports stream blobs instead); with stream and a
// --content-root given, the checks that read it. nil when all is well, when
// nothing asks for the directory, and with --write-path=direct (its imports
// fail, saying why).
func (r *Runtime) ContentRootOff(ctx context.Context) error {
	d := r.direct
	if d == nil {
		return nil
	}
	switch d.opts.Path {
	case WriteAuto:
		if _, err := d.rootFor(ctx, r); err != nil {
			return err
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.err != nil {
			return fmt.Errorf("%w: imports stream blobs through containerd", d.err)
		}
		return nil
	case WriteDirect:
		return nil
	}
	root := d.opts.ContentRoot
	if root == "" {
		return nil
	}
	off := func(err error) error {
		return fmt.Errorf("%w: the free-space and blob-file checks do not see containerd's store", err)
	}
	if _, err := os.Stat(root); err != nil {
		return off(err)
	}
	if err := r.probeRoot(ctx, root); err != nil {
		return off(err)
	}
	return nil
}

// resolve finds the content root and checks holdfast can write blobs there
// that containerd will take as its own.
func (d *directWriter) resolve(ctx context.Context, r *Runtime) (string, error) {
	root := d.opts.ContentRoot
	if root == "" {
		var err error
		if root, err = r.contentRoot(ctx); err != nil {
			return "", fmt.Errorf("asking containerd for its content store's directory: %w", err)
		}
	}
	policy, err := r.contentPolicy(ctx)
	if err != nil {
		return "", fmt.Errorf("asking containerd for its content sharing policy: %w", err)
	}
	// Only a shared store commits a blob whose file exists by metadata alone;
	// containerd 1.6 does not export the policy, and shared is its default.
	if policy != "" && policy != "shared" {
		return "", fmt.Errorf("containerd's content sharing policy is %q, not shared", policy)
	}
	fi, err := os.Stat(root)
	probed := false
	if errors.Is(err, fs.ErrNotExist) {
		// containerd 1.7 and 2.2 make the directory at their first write,
		// and the probe is one, written through containerd.
		if err := r.probeRoot(ctx, root); err != nil {
			return "", err
		}
		probed = true
		fi, err = os.Stat(root)
	}
	if err != nil {
		return "", err
	} else if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory", root)
	}
	if !probed {
		if err := r.probeRoot(ctx, root); err != nil {
			return "", err
		}
	}
	blobs := filepath.Join(root, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return "", fmt.Errorf("creating %s: %w", blobs, err)
	}
	tmp := filepath.Join(root, tempDirName)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return "", fmt.Errorf("creating %s: %w", tmp, err)
	}
	if err := sameFS(blobs, tmp); err != nil {
		return "", err
	}
	if err := sweepTemp(tmp, func(p string) bool { return r.reapJournal(ctx, root, p) }); err != nil {
		return "", err
	}
	return root, nil
}

// probeLife is how long the lease of a probe blob lasts. A probe is read
// back at once; its lease outlives that only so that deleting it does not
// set containerd's GC off in the middle of the first import (see probeRoot).
// Once it has expired, containerd's next GC may collect it, and Cleanup
// deletes it: a process killed while it held one leaves nothing for longer.
const probeLife = 10 * time.Minute

// probeLeasePrefix starts the ID of a probe's lease. Its label
// (runtime.LabelProbe), not its ID, tells it from a source's lease: an
// archive named probe-… has a lease whose ID starts the same.
const probeLeasePrefix = runtime.LeasePrefix + "probe-"

// probeRoot proves root is the directory containerd keeps its blobs in:
// a small blob of its own, written through containerd's content API under a
// lease, must appear there with its bytes. Blobs being there is no proof: a
// directory holdfast (or anyone) once filled with copies has them too. The
// probe stays until the Runtime is closed (see dropProbe) or its lease
// expires (probeLife): removing it now would set containerd's GC off in the
// middle of the first import, and a GC removes the files of blobs linked and
// not yet committed (their commits then stream them after all).
func (r *Runtime) probeRoot(ctx context.Context, root string) error {
	data := []byte("holdfast: a probe of the content store's directory " + randomHex(16) + "\n")
	desc := ocispec.Descriptor{MediaType: "application/octet-stream", Digest: digest.FromBytes(data), Size: int64(len(data))}
	file := filepath.Join(root, "blobs", desc.Digest.Algorithm().String(), desc.Digest.Encoded())
	ls := r.client.LeasesService()
	l, err := ls.Create(ctx, leases.WithID(probeLeasePrefix+randomHex(8)), leases.WithExpiration(probeLife),
		leases.WithLabel(runtime.LabelProbe, "content-root"))
	if err != nil {
		return fmt.Errorf("probing %s: creating a lease: %w", root, err)
	}
	cs := r.client.ContentStore()
	r.direct.probe = func(ctx context.Context) {
		// Its bytes are unique: nothing else can want its file.
		if cs.Delete(ctx, desc.Digest) == nil {
			_ = os.Remove(file)
		}
		_ = ls.Delete(ctx, l)
	}
	if err := content.WriteBlob(leases.WithLease(ctx, l.ID), cs, r.probeRef(), bytes.NewReader(data), desc,
		content.WithLabels(map[string]string{localSource: "probe"})); err != nil {
		return fmt.Errorf("probing %s: writing a blob through containerd: %w", root, err)
	}
	got, err := os.ReadFile(file)
	if err != nil || !bytes.Equal(got, data) {
		return fmt.Errorf("%s is not containerd's content store: a blob written through containerd (%s) is not there", root, desc.Digest)
	}
	return nil
}

// probeRef is the ingest ref of a probe blob: this Runtime's owner and run
// are in it, as in an import's, so that a later run of the same data dir
// aborts the ingest of a probe killed mid-write (Cleanup).
func (r *Runtime) probeRef() string {
	return refPrefix + r.owner + "-" + r.run + "-probe-" + randomHex(6)
}

// dropProbe removes the probe blob, if one was written.
func (d *directWriter) dropProbe(ctx context.Context) {
	if d == nil {
		return
	}
	d.mu.Lock()
	probe := d.probe
	d.probe = nil
	d.mu.Unlock()
	if probe != nil {
		ctx, cancel := context.WithTimeout(ctx, abandonTimeout)
		defer cancel()
		probe(ctx)
	}
}

// sweepProbes deletes the leases of probes whose life is over, left by a
// holdfast killed before it closed its Runtime: nobody relies on an expired
// lease (containerd's GC may collect it at any time), so one of a live
// process is fair game too. Deleting it sets containerd's GC off, which
// collects the probe blob.
func (r *Runtime) sweepProbes(ctx context.Context, now time.Time) error {
	ls := r.client.LeasesService()
	probes, err := ls.List(ctx, fmt.Sprintf(`labels.%q`, runtime.LabelProbe))
	if err != nil {
		return fmt.Errorf("listing probe leases: %w", err)
	}
	var errs []error
	for _, l := range probes {
		if !probeExpired(l, now) {
			continue
		}
		if err := ls.Delete(ctx, l); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting probe lease %s: %w", l.ID, err))
		}
	}
	return errors.Join(errs...)
}

// probeExpired reports whether l is a probe's lease of holdfast's whose life
// is over: its expiry (containerd.io/gc.expire) has passed, or, without a
// readable one, probeLife since its creation.
func probeExpired(l leases.Lease, now time.Time) bool {
	if l.Labels[runtime.LabelProbe] == "" || !strings.HasPrefix(l.ID, runtime.LeasePrefix) {
		return false
	}
	if exp, err := time.Parse(time.RFC3339, l.Labels[gcExpireLabel]); err == nil {
		return now.After(exp)
	}
	return now.Sub(l.CreatedAt) > probeLife
}

// gcExpireLabel is the label containerd's GC reads a lease's expiry from
// (leases.WithExpiration sets it).
const gcExpireLabel = "containerd.io/gc.expire"

// contentPolicy is the metadata plugin's content sharing policy; "" when it
// does not say.
func (r *Runtime) contentPolicy(ctx context.Context) (string, error) {
	resp, err := r.client.IntrospectionService().Plugins(ctx, metadataPlugin)
	if err != nil {
		return "", err
	}
	for _, p := range resp.Plugins {
		if policy := p.Exports["policy"]; policy != "" {
			return policy, nil
		}
	}
	return "", nil
}
