package containerd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
)

// blobFiles checks the content store's blob files themselves. containerd's
// metadata lists a blob as long as its record is there, even when its file
// was removed by hand (or lost to a disk fault, or to a restore of another
// state of the directory): a source whose blob has no file is not intact,
// and its import must write the file again.
type blobFiles struct{ dir string } // <content root>/blobs

// blobFilesOf returns the check of the content store's directory as holdfast
// sees it, or nil when holdfast cannot see it: no root is known, or none of
// the state blobs' files is there (another filesystem at that path, as in a
// container without the mount). states are the state blobs by lease.
func (r *Runtime) blobFilesOf(ctx context.Context, states map[string]content.Info) *blobFiles {
	if len(states) == 0 || r.space == nil {
		return nil
	}
	root := r.space.rootOf(ctx, r)
	if root == "" {
		return nil
	}
	f := &blobFiles{dir: filepath.Join(root, "blobs")}
	for _, info := range states {
		if !f.missing(info.Digest) {
			return f
		}
	}
	return nil
}

// missing reports whether blob d has no file.
func (f *blobFiles) missing(d digest.Digest) bool {
	if f == nil || d.Validate() != nil {
		return false
	}
	_, err := os.Lstat(filepath.Join(f.dir, d.Algorithm().String(), d.Encoded()))
	return errors.Is(err, fs.ErrNotExist)
}

// lostBlobs are blobs whose record outlived their file: the next import
// removes the records, so that it writes the files again.
type lostBlobs struct {
	mu sync.Mutex
	ds map[digest.Digest]bool
}

func (l *lostBlobs) add(d digest.Digest) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ds == nil {
		l.ds = map[digest.Digest]bool{}
	}
	l.ds[d] = true
}

// forget removes the records of the lost blobs (in the Runtime's namespace:
// the file is gone for every namespace alike). A record that cannot be
// removed stays listed for the next import.
func (r *Runtime) forgetLost(ctx context.Context) error {
	l := &r.lost
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for d := range l.ds {
		if err := r.client.ContentStore().Delete(ctx, d); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, err)
			continue
		}
		delete(l.ds, d)
	}
	return errors.Join(errs...)
}

// syncBlobsDir syncs the directory containerd commits blobs into, when
// holdfast sees it. containerd 1.6 renames a committed blob into place
// without syncing the directory: after a power loss its metadata could list
// a blob whose file is gone, and a spool file or an archive imported with
// `holdfast import` may be gone by then too. One sync at the end of an import
// covers every blob it committed (containerd 2 syncs after each; holdfast's
// direct writes sync their own links). Not seeing the directory, it does
// nothing; failing to sync it fails the import.
func (r *Runtime) syncBlobsDir(ctx context.Context) error {
	if r.space == nil {
		return nil
	}
	root := r.space.rootOf(ctx, r)
	if root == "" {
		return nil
	}
	dir := filepath.Join(root, "blobs", "sha256")
	d, err := os.Open(dir)
	if err != nil {
		return nil // not there as holdfast sees it
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}
