package containerd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/units"
)

// SpaceOptions tune the disk check of imports.
type SpaceOptions struct {
	// ContentRoot is the content store's directory as holdfast sees it;
	// empty asks containerd (introspection: the content plugin's root). Give
	// it when containerd sees another filesystem at that path (another mount
	// namespace, a container).
	ContentRoot string
	// MinFree is what an import must leave free on that filesystem.
	MinFree runtime.MinFree
	// Log gets one line when the check cannot be made.
	Log *slog.Logger
}

// spaceGuard refuses writes that would leave the content store's filesystem
// with less than MinFree. It finds the filesystem once, on the first import
// that writes: unchanged sources never pay for it.
type spaceGuard struct {
	opts     SpaceOptions
	mu       sync.Mutex
	resolved bool
	root     string // empty: no check
}

// contentPlugin is the introspection filter of the content store plugin,
// which exports its directory as "root".
const contentPlugin = "type==io.containerd.content.v1,id==content"

// rootOf finds the directory to stat, once; "" when it cannot be found.
func (g *spaceGuard) rootOf(ctx context.Context, r *Runtime) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.resolved {
		return g.root
	}
	root, from := g.opts.ContentRoot, "--content-root"
	if root == "" {
		var err error
		if root, err = r.contentRoot(ctx); err != nil {
			if ctx.Err() != nil {
				return "" // try again on the next import
			}
			g.resolved = true
			g.skip("asking containerd for its content store's directory", err)
			return ""
		}
		from = "containerd"
	}
	g.resolved = true
	at := root
	if from == "containerd" {
		// containerd 1.7 and 2.2 make the directory at their first write:
		// till then the directory it will be made in has its filesystem (a
		// mount needs a directory to be mounted on). A --content-root that
		// is not there is a mistake to report.
		at = existingAncestor(root)
	}
	if _, err := statfs(at); err != nil {
		g.skip("statting the content store's directory "+root+" (from "+from+")", err)
		return ""
	}
	g.root = root
	if g.opts.Log != nil {
		g.opts.Log.Debug("imports check free disk space", "contentRoot", root, "from", from, "minFree", g.opts.MinFree.String())
	}
	return root
}

func (g *spaceGuard) skip(doing string, err error) {
	if g.opts.Log != nil {
		g.opts.Log.Warn("free disk space is not checked before imports (give --content-root)", "doing", doing, "error", err.Error())
	}
}

// existingAncestor is path, or the nearest directory above it that exists.
func existingAncestor(path string) string {
	for p := filepath.Clean(path); ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil || p == filepath.Dir(p) {
			return p
		}
	}
}

// contentRoot asks containerd where its content store keeps blobs.
func (r *Runtime) contentRoot(ctx context.Context) (string, error) {
	resp, err := r.client.IntrospectionService().Plugins(ctx, contentPlugin)
	if err != nil {
		return "", err
	}
	for _, p := range resp.Plugins {
		if root := p.Exports["root"]; root != "" {
			return root, nil
		}
	}
	return "", errors.New("the content plugin exports no root")
}

// fsSpace is what statfs says of a filesystem, in bytes.
type fsSpace struct {
	free  int64 // available to an unprivileged writer, as df shows
	total int64
	block int64
}

func statfs(path string) (fsSpace, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return fsSpace{}, err
	}
	bs := int64(st.Bsize)
	return fsSpace{free: int64(st.Bavail) * bs, total: int64(st.Blocks) * bs, block: bs}, nil
}

// onDisk is the space blobs of bytes in total take, at most: each file
// rounds up to a whole block.
func onDisk(blobs int, bytes, block int64) int64 {
	if block <= 0 {
		return bytes
	}
	return bytes + int64(blobs)*(block-1)
}

// shortfall is how many bytes short a write of need is, when free bytes are
// free and keep must stay free; 0 when it fits.
func shortfall(need, free, keep int64) int64 {
	return max(0, need+keep-free)
}

// check refuses a write of blobs totalling bytes that would leave less than
// MinFree. what names the write in the error.
func (g *spaceGuard) check(ctx context.Context, r *Runtime, what string, blobs int, bytes int64) error {
	if g == nil || bytes <= 0 {
		return nil
	}
	root := g.rootOf(ctx, r)
	if root == "" {
		return nil
	}
	fs, err := statfs(existingAncestor(root))
	if err != nil {
		return nil // the directory went away: containerd will say what is wrong
	}
	need := onDisk(blobs, bytes, fs.block)
	keep := g.opts.MinFree.Of(fs.total)
	if shortfall(need, fs.free, keep) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s %s in containerd's content store (%s), %s is free there and %s must stay free (--min-free)",
		runtime.ErrNoSpace, what, units.BytesExact(need), root, units.BytesExact(fs.free), units.BytesExact(keep))
}

// Reserve refuses an archive whose blobs would not fit, before any is written.
func (w *ingester) Reserve(ctx context.Context, blobs int, bytes int64) error {
	return w.r.space.check(ctx, w.r, fmt.Sprintf("the archive's %d new blobs need", blobs), blobs, bytes)
}
