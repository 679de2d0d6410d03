package agent

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/holdfast-project/holdfast/internal/source"
)

// watcher says when something in the images dirs may have changed. It uses
// inotify on every dir and subdir (never a sibling), and falls back to polling
// the dirs when inotify cannot be used.
type watcher struct {
	fs    *fsnotify.Watcher
	dirs  []string
	out   chan string
	done  chan struct{}
	log   *slog.Logger
	poll  time.Duration
	quiet time.Duration // events closer than this are one change
}

func newWatcher(dirs []string, settle time.Duration, log *slog.Logger) (*watcher, error) {
	return startWatcher(dirs, settle, log, false)
}

// startWatcher starts a watcher; forcePoll skips inotify (tests).
func startWatcher(dirs []string, settle time.Duration, log *slog.Logger, forcePoll bool) (*watcher, error) {
	w := &watcher{dirs: dirs, out: make(chan string, 1), done: make(chan struct{}), log: log,
		poll: max(settle/2, time.Second), quiet: 200 * time.Millisecond}
	var fw *fsnotify.Watcher
	err := errors.New("polling was asked for")
	if !forcePoll {
		fw, err = fsnotify.NewWatcher()
	}
	if err == nil {
		w.fs = fw
		for _, d := range dirs {
			if err = w.addTree(d); err != nil {
				break
			}
		}
	}
	if err != nil {
		if w.fs != nil {
			w.fs.Close()
			w.fs = nil
		}
		log.Warn("cannot watch the images dirs with inotify; polling them instead", "error", err, "every", w.poll)
		go w.pollLoop()
		return w, nil
	}
	go w.loop()
	return w, nil
}

// Events delivers one value per burst of changes.
func (w *watcher) Events() <-chan string { return w.out }

func (w *watcher) Close() {
	close(w.done)
	if w.fs != nil {
		w.fs.Close()
	}
}

// addTree watches dir and every subdirectory that can hold sources. A missing
// dir is not an error: its parent is not watched (that would be a sibling),
// so it is picked up by the periodic resync once it exists.
func (w *watcher) addTree(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
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

func (w *watcher) loop() {
	var pending string
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-w.done:
			return
		case ev, ok := <-w.fs.Events:
			if !ok {
				return
			}
			if ev.Has(fsnotify.Create) {
				if fi, err := os.Stat(ev.Name); err == nil && fi.IsDir() && !source.Ignored(filepath.Base(ev.Name)) {
					if err := w.addTree(ev.Name); err != nil {
						w.log.Warn("cannot watch a new directory", "path", ev.Name, "error", err)
					}
				}
			}
			if strings.HasPrefix(filepath.Base(ev.Name), ".") && !ev.Has(fsnotify.Rename) && !ev.Has(fsnotify.Remove) {
				continue // a dotfile being written: its rename into place is the event that counts
			}
			pending = ev.Name
			timer.Reset(w.quiet)
		case err, ok := <-w.fs.Errors:
			if !ok {
				return
			}
			w.log.Warn("watching the images dirs", "error", err)
			pending = "overflow"
			timer.Reset(w.quiet)
		case <-timer.C:
			select {
			case w.out <- pending:
			default:
			}
		}
	}
}

// pollLoop compares a fingerprint of the dirs' sources every poll interval.
func (w *watcher) pollLoop() {
	last := fingerprint(w.dirs)
	t := time.NewTicker(w.poll)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-t.C:
			if fp := fingerprint(w.dirs); fp != last {
				last = fp
				select {
				case w.out <- "poll":
				default:
				}
			}
		}
	}
}

func fingerprint(dirs []string) string {
	var b strings.Builder
	for _, s := range source.Scan(dirs).Sources {
		b.WriteString(s.Path)
		b.WriteByte(0)
		b.WriteString(s.Identity)
		b.WriteByte(0)
	}
	return b.String()
}
