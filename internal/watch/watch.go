// Package watch says when something in the images dirs and spool dirs may
// have changed: inotify where it can, polling where it cannot.
package watch

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/holdfast-project/holdfast/internal/source"
	"github.com/holdfast-project/holdfast/internal/units"
)

// Watcher says when something in the images dirs may have changed. It uses
// inotify on every dir and subdir (never a sibling), and falls back to polling
// the dirs when inotify cannot be used.
//
// An inotify watch follows an inode, not a path: an images dir deleted and
// re-created, mounted over, re-pointed (a symlink) or created after the start
// would go unwatched. So the watcher checks each images dir's identity
// (device and inode of the directory it resolves to) every recheck interval,
// and at once when inotify says a watched dir went, and watches it again
// whenever it changed, reporting the change.
type Watcher struct {
	fs      *fsnotify.Watcher
	dirs    []string
	roots   []*watchRoot // used by loop only
	out     chan []string
	refresh chan struct{}
	done    chan struct{}
	log     *slog.Logger
	poll    time.Duration
	quiet   time.Duration // events closer than this are one change
	recheck time.Duration // how often the images dirs' identities are checked
}

// watchRoot is one images dir as last watched.
type watchRoot struct {
	path string // as given
	real string // the directory it resolved to; "" while missing
	dev  uint64
	ino  uint64
}

// kubeletData is the symlink through which the kubelet's ConfigMap and
// Secret volumes expose their keys (<dir>/<key> -> ..data/<key>).
const kubeletData = "..data"

// maxNames caps the paths one event reports (they are only logged).
const maxNames = 16

// New watches dirs; a file counts as written once it has stayed unchanged
// for settle.
func New(dirs []string, settle time.Duration, log *slog.Logger) (*Watcher, error) {
	return startWatcher(dirs, settle, log, false)
}

// startWatcher starts a watcher; forcePoll skips inotify (tests).
func startWatcher(dirs []string, settle time.Duration, log *slog.Logger, forcePoll bool) (*Watcher, error) {
	w := &Watcher{dirs: dirs, out: make(chan []string, 1), refresh: make(chan struct{}, 1), done: make(chan struct{}), log: log,
		poll: max(settle/2, time.Second), quiet: 200 * time.Millisecond, recheck: time.Second}
	var fw *fsnotify.Watcher
	err := errors.New("polling was asked for")
	if !forcePoll {
		fw, err = fsnotify.NewWatcher()
	}
	if err == nil {
		w.fs = fw
		for _, d := range dirs {
			r := &watchRoot{path: d}
			w.roots = append(w.roots, r)
			if _, err = w.checkRoot(r, false); err != nil {
				break
			}
			if r.real == "" {
				log.Debug("images dir does not exist yet; watching for it", "path", d)
			}
		}
	}
	if err != nil {
		if w.fs != nil {
			w.fs.Close()
			w.fs = nil
		}
		log.Warn("cannot watch the images dirs with inotify; polling them instead", "error", err, "every", w.poll)
		go w.pollLoop(snapshot(dirs)) // taken before returning: changes from now on are reported
		return w, nil
	}
	go w.loop()
	return w, nil
}

// Events delivers the paths of one burst of changes (up to maxNames).
func (w *Watcher) Events() <-chan []string { return w.out }

// Refresh walks every images dir again and watches what is not watched (a
// subdirectory mounted over, say). The agent calls it at each resync.
func (w *Watcher) Refresh() {
	select {
	case w.refresh <- struct{}{}:
	default:
	}
}

func (w *Watcher) Close() {
	close(w.done)
	if w.fs != nil {
		w.fs.Close()
	}
}

// checkRoot resolves an images dir and watches it again if it is not the
// directory last watched (or, with force, in any case). It says what changed
// ("" for nothing); the error is one that inotify cannot go on with.
func (w *Watcher) checkRoot(r *watchRoot, force bool) (string, error) {
	real, err := filepath.EvalSymlinks(r.path)
	var st syscall.Stat_t
	if err == nil {
		err = syscall.Stat(real, &st)
	}
	if err == nil && st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		err = syscall.ENOTDIR
	}
	if err != nil {
		if r.real == "" {
			return "", nil
		}
		w.log.Warn("images dir is gone; watching for it to come back", "path", r.path, "error", err)
		w.unwatch(r.real)
		r.real, r.dev, r.ino = "", 0, 0
		return "gone", nil
	}
	dev, ino := uint64(st.Dev), uint64(st.Ino)
	changed := ""
	switch {
	case r.real == "":
		changed = "appeared"
	case real != r.real || dev != r.dev || ino != r.ino:
		changed = "replaced"
		w.unwatch(r.real)
	case !w.watched(real):
		// Deleted and made again with the same inode number (file systems
		// reuse them): inotify dropped the watch all the same.
		changed = "unwatched"
	case !force:
		return "", nil
	}
	if real != filepath.Clean(r.path) && real != r.real {
		w.log.Info("images dir is a symlink", "path", r.path, "target", real)
	}
	r.real, r.dev, r.ino = real, dev, ino
	return changed, w.addTree(real)
}

// checkRoots checks every images dir (see checkRoot) and returns the paths
// of those that changed.
func (w *Watcher) checkRoots(force bool) []string {
	var changed []string
	for _, r := range w.roots {
		what, err := w.checkRoot(r, force)
		if err != nil {
			w.log.Warn("cannot watch an images dir; the next resync tries again", "path", r.path, "error", err)
		}
		if what != "" {
			if what != "gone" {
				w.log.Info("watching an images dir again", "path", r.path, "because", what, "dir", r.real)
			}
			changed = append(changed, r.path)
		}
	}
	return changed
}

// watched reports whether inotify watches dir.
func (w *Watcher) watched(dir string) bool {
	return slices.Contains(w.fs.WatchList(), dir)
}

// unwatch drops the watches on dir and below (a directory that went, or the
// one a path no longer leads to).
func (w *Watcher) unwatch(dir string) {
	for _, p := range w.fs.WatchList() {
		if p == dir || strings.HasPrefix(p, dir+string(filepath.Separator)) {
			_ = w.fs.Remove(p)
		}
	}
}

// addTree watches dir and every subdirectory that can hold sources.
func (w *Watcher) addTree(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if !d.IsDir() {
			return nil
		}
		if path != dir && source.Ignored(d.Name()) {
			return fs.SkipDir
		}
		if err := w.fs.Add(path); err != nil {
			if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EMFILE) {
				return err
			}
			w.log.Debug("not watching", "path", path, "error", err)
		}
		return nil
	})
}

// given names a path under the directory an images dir resolved to under
// the images dir as given, as sources are named.
func (w *Watcher) given(path string) string {
	for _, r := range w.roots {
		if r.real != "" && r.real != r.path && (path == r.real || strings.HasPrefix(path, r.real+string(filepath.Separator))) {
			return filepath.Join(r.path, strings.TrimPrefix(path, r.real))
		}
	}
	return path
}

// isRoot reports whether path is a directory an images dir resolved to.
func (w *Watcher) isRoot(path string) bool {
	for _, r := range w.roots {
		if r.real != "" && r.real == path {
			return true
		}
	}
	return false
}

func (w *Watcher) loop() {
	var pending []string
	note := func(paths ...string) {
		for _, p := range paths {
			if len(pending) < maxNames && !slices.Contains(pending, p) {
				pending = append(pending, p)
			}
		}
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	recheck := time.NewTicker(w.recheck)
	defer recheck.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-recheck.C:
			if changed := w.checkRoots(false); len(changed) > 0 {
				note(changed...)
				timer.Reset(w.quiet)
			}
		case <-w.refresh:
			if changed := w.checkRoots(true); len(changed) > 0 {
				note(changed...)
				timer.Reset(w.quiet)
			}
		case ev, ok := <-w.fs.Events:
			if !ok {
				return
			}
			if (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)) && w.isRoot(ev.Name) {
				note(w.checkRoots(false)...)
			}
			if ev.Has(fsnotify.Create) {
				if fi, err := os.Stat(ev.Name); err == nil && fi.IsDir() && !source.Ignored(filepath.Base(ev.Name)) {
					if err := w.addTree(ev.Name); err != nil {
						w.log.Warn("cannot watch a new directory", "path", ev.Name, "error", err)
					}
				}
			}
			// A dotfile being written: its rename into place is the event that
			// counts. (The images dirs' marker is one too: a pass writes it.)
			// Except "..data": in a ConfigMap or Secret volume the kubelet
			// renames it into place to swap every key's content at once (its
			// create event here), and the keys are only symlinks through it.
			if base := filepath.Base(ev.Name); strings.HasPrefix(base, ".") && base != kubeletData &&
				!ev.Has(fsnotify.Rename) && !ev.Has(fsnotify.Remove) {
				continue
			}
			note(w.given(ev.Name))
			timer.Reset(w.quiet)
		case err, ok := <-w.fs.Errors:
			if !ok {
				return
			}
			// Events were lost (an overflow, say): new subdirectories may be
			// unwatched too.
			w.log.Warn("watching the images dirs", "error", err)
			w.checkRoots(true)
			note(w.dirs...)
			timer.Reset(w.quiet)
		case <-timer.C:
			select {
			case w.out <- pending:
			default:
			}
			pending = nil
		}
	}
}

// pollLoop compares the dirs' sources every poll interval and reports the
// paths of those that were added, removed or changed.
func (w *Watcher) pollLoop(last map[string]string) {
	t := time.NewTicker(w.poll)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-w.refresh:
		case <-t.C:
			now := snapshot(w.dirs)
			if changed := diffSnapshots(last, now); len(changed) > 0 {
				select {
				case w.out <- changed:
				default:
				}
			}
			last = now
		}
	}
}

// snapshot maps each source of the dirs to its identity. It only notices
// changes, which start a pass: the pass is what refuses dirs and lists others
// may write, so the snapshot sees them all.
func snapshot(dirs []string) map[string]string {
	out := map[string]string{}
	for _, s := range source.ScanWith(dirs, source.ScanOptions{InsecurePerms: true}).Sources {
		out[s.Path] = s.Identity
	}
	return out
}

// diffSnapshots lists the paths added, removed or changed, sorted, up to maxNames.
func diffSnapshots(a, b map[string]string) []string {
	var out []string
	for p, id := range b {
		if old, ok := a[p]; !ok || old != id {
			out = append(out, p)
		}
	}
	for p := range a {
		if _, ok := b[p]; !ok {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	if len(out) > maxNames {
		out = append(out[:maxNames-1], units.Rest(len(out)-maxNames+1))
	}
	return out
}
