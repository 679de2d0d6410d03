package containerd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"
)

// linkedPrefix names the journals in holdfast-tmp of the blobs an import
// linked into the store. containerd records a blob the direct path placed
// only when its commit comes; a blob linked and never committed (the import
// failed, its lease was released under it, or the process was killed) is a
// file no namespace records, and containerd's GC sweeps the directory only
// after a collection that removed something, so it may stay for good. Each
// import writes, durably and before each link, "<digest> <inode>" to its own
// journal, locked while the import lives: the import removes what it linked
// and did not get recorded when it ends, and every pass (Cleanup) does the
// same for the journals of imports that died.
const linkedPrefix = "linked-"

// linkJournal is one import's journal of linked blobs.
type linkJournal struct {
	mu   sync.Mutex
	f    *os.File
	root string
	ours map[digest.Digest]uint64 // linked by this import: the inode of its file
}

// journalLinks opens the import's journal in root's holdfast-tmp, once.
func (w *ingester) journalLinks(root string) (*linkJournal, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.links != nil {
		return w.links, nil
	}
	f, err := os.CreateTemp(filepath.Join(root, tempDirName), linkedPrefix)
	if err != nil {
		return nil, fmt.Errorf("creating the journal of linked blobs: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		_ = os.Remove(f.Name())
		_ = f.Close()
		return nil, fmt.Errorf("locking %s: %w", f.Name(), err)
	}
	w.links = &linkJournal{f: f, root: root, ours: map[digest.Digest]uint64{}}
	return w.links, nil
}

// inodeOf is the inode of an open file.
func inodeOf(f *os.File) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, fmt.Errorf("statting %s: %w", f.Name(), err)
	}
	return st.Ino, nil
}

// record writes the blobs about to be linked and syncs the journal: a link
// that outlives a crash is then in it.
func (j *linkJournal) record(entries map[digest.Digest]uint64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	var b strings.Builder
	for d, ino := range entries {
		fmt.Fprintf(&b, "%s %d\n", d, ino)
	}
	if _, err := j.f.WriteString(b.String()); err != nil {
		return fmt.Errorf("writing %s: %w", j.f.Name(), err)
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", j.f.Name(), err)
	}
	return nil
}

// linked notes a link this import made.
func (j *linkJournal) linked(d digest.Digest, ino uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.ours[d] = ino
}

// closeLinks ends the import's journal: every blob it linked, or failed to
// commit, that no namespace records is removed, then the journal.
func (w *ingester) closeLinks(ctx context.Context) {
	w.mu.Lock()
	j := w.links
	w.links = nil
	left := map[digest.Digest]uint64{}
	for d := range w.failed {
		left[d] = 0 // containerd's file, if any: whatever its inode
	}
	if j != nil {
		for d, ino := range j.ours {
			if !w.committed[d] {
				left[d] = ino
			}
		}
	}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonTimeout)
	defer cancel()
	if len(left) > 0 {
		root := ""
		switch {
		case j != nil:
			root = j.root
		case w.r.direct != nil && w.r.direct.opts.ContentRoot != "":
			root = w.r.direct.opts.ContentRoot
		default:
			root, _ = w.r.contentRoot(ctx)
		}
		if root != "" {
			for d, ino := range left {
				_ = w.r.removeUnrecorded(ctx, root, d, ino)
			}
		}
	}
	if j != nil {
		_ = os.Remove(j.f.Name())
		_ = j.f.Close()
	}
}

// reapJournal removes the blobs a dead import's journal lists that no
// namespace records, then the journal. It reports whether path was such a
// journal (and so is dealt with).
func (r *Runtime) reapJournal(ctx context.Context, root, path string) bool {
	if !strings.HasPrefix(filepath.Base(path), linkedPrefix) {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return true
	}
	defer f.Close()
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		return true // its import is alive
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		ds, inos, ok := strings.Cut(sc.Text(), " ")
		d, derr := digest.Parse(ds)
		ino, ierr := strconv.ParseUint(inos, 10, 64)
		if !ok || derr != nil || ierr != nil {
			continue // a line cut by the crash: its link never happened
		}
		if err := r.removeUnrecorded(ctx, root, d, ino); err != nil {
			return true // kept for the next pass
		}
	}
	_ = os.Remove(path)
	return true
}

// removeUnrecorded removes the blob file of d that holdfast linked (inode
// ino; 0: any) unless a namespace records d or an ingest is writing it. A
// file that is not the one linked (containerd's own, or another import's)
// is left.
//
// What is left is a window of milliseconds: another process that opens a
// writer for d and commits it by metadata (its file being there) between
// these checks and the unlink, that is, an import of the same blob at the
// very moment this one fails or a pass reaps a dead one.
func (r *Runtime) removeUnrecorded(ctx context.Context, root string, d digest.Digest, ino uint64) error {
	path := filepath.Join(root, "blobs", d.Algorithm().String(), d.Encoded())
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	if ino != 0 && st.Ino != ino {
		return nil
	}
	nss, err := r.client.NamespaceService().List(ctx)
	if err != nil {
		return fmt.Errorf("listing namespaces: %w", err)
	}
	cs := r.client.ContentStore()
	for _, ns := range nss {
		nctx := namespaces.WithNamespace(ctx, ns)
		if _, err := cs.Info(nctx, d); err == nil {
			return nil
		} else if !errdefs.IsNotFound(err) {
			return fmt.Errorf("asking namespace %s for %s: %w", ns, d, err)
		}
		statuses, err := cs.ListStatuses(nctx)
		if err != nil {
			return fmt.Errorf("listing the ingests of namespace %s: %w", ns, err)
		}
		for _, s := range statuses {
			if s.Expected == d {
				return nil
			}
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
