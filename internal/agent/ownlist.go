package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/holdfast-project/holdfast/internal/files"
	"github.com/holdfast-project/holdfast/internal/pass"
	"github.com/holdfast-project/holdfast/internal/source"
)

// ownList is a pull list of kind peers that the agent owns and writes (the
// peer source, a set's list): its references, which each pass takes from
// the agent (pass.Handoff's Peers), not from its file, and when each left
// what the list is for. The file is the record of the list for restarts: at
// start the agent takes it as the list it wrote last, if it passes the
// checks of any list (files.CheckPerms unless --insecure-perms), and writes
// its own list back over it whenever it says anything else. Its owner holds
// its lock.
type ownList struct {
	path          string
	what          string // what the list is, in logs: "peer list"
	header        string // the comment lines that start its file
	max           int    // references it holds at most
	insecurePerms bool
	log           *slog.Logger

	loaded bool
	refs   []string             // as written, sorted
	left   map[string]time.Time // ref → when it left what the list is for; absent while in it
}

// load reads the list the agent wrote last, once: false while it cannot.
// Written anew, it would drop at once what it holds: it stays as it is (the
// pass reads its file, a list of kind peers, and keeps an unreadable list's
// pins too), and is read again at the next judgment or pass.
func (l *ownList) load() bool {
	if l.loaded {
		return true
	}
	refs, err := readPeerList(l.path)
	if err == nil && !l.insecurePerms {
		err = files.CheckPerms(l.what, l.path, os.Geteuid())
	}
	if err != nil {
		l.log.Warn("reading the "+l.what+"; it stays as it is", "path", l.path, "error", err)
		return false
	}
	l.refs, l.left, l.loaded = refs, map[string]time.Time{}, true
	return true
}

// age is what stays of the list as in is what it is for now: every
// reference in it, and those that left it less than grace ago; it notes
// when each left, and logs those it drops with why.
func (l *ownList) age(in map[string]bool, now time.Time, grace time.Duration, why string) map[string]bool {
	next := map[string]bool{}
	for _, ref := range l.refs {
		if in[ref] {
			delete(l.left, ref)
			next[ref] = true
			continue
		}
		since, ok := l.left[ref]
		if !ok {
			since = now
			l.left[ref] = now
		}
		if now.Sub(since) < grace {
			next[ref] = true
		} else {
			delete(l.left, ref)
			l.log.Info("released from the "+l.what+": "+why, "ref", ref, "since", since, "path", l.path)
		}
	}
	return next
}

// due is when the next reference's grace ends; zero if none is waiting.
func (l *ownList) due(grace time.Duration) time.Time {
	var due time.Time
	for _, since := range l.left {
		if end := since.Add(grace); due.IsZero() || end.Before(due) {
			due = end
		}
	}
	return due
}

// write makes next the list, and writes it when it changed; what the list
// holds stays first, so that a full list never drops what it pulled for
// something new.
func (l *ownList) write(next map[string]bool) {
	refs := make([]string, 0, len(next))
	for _, ref := range l.refs {
		if next[ref] {
			refs = append(refs, ref)
			delete(next, ref)
		}
	}
	refs = append(refs, slices.Sorted(maps.Keys(next))...)
	if len(refs) > l.max {
		l.log.Warn("the "+l.what+" is full: the other images are not pulled from peers", "path", l.path, "listed", l.max, "left out", len(refs)-l.max)
		refs = refs[:l.max]
	}
	slices.Sort(refs)
	if slices.Equal(refs, l.refs) {
		l.restoreFile()
		return
	}
	if err := writeList(l.path, l.header, refs, l.insecurePerms); err != nil {
		l.log.Error("writing the "+l.what, "path", l.path, "error", err)
	} else {
		l.refs = refs
	}
}

// restoreFile writes the agent's list back over its file when the file says
// anything else (an edit by hand). The list is loaded.
func (l *ownList) restoreFile() {
	want := listText(l.header, l.refs)
	got, err := readBounded(l.path, int64(len(want))+1)
	switch {
	case errors.Is(err, fs.ErrNotExist) && len(l.refs) == 0:
		return
	case err == nil && len(l.refs) > 0 && bytes.Equal(got, want):
		return
	}
	l.log.Warn("the "+l.what+"'s file differs from the agent's list (edited by hand?); writing the agent's back", "path", l.path)
	if err := writeList(l.path, l.header, l.refs, l.insecurePerms); err != nil {
		l.log.Error("writing the "+l.what, "path", l.path, "error", err)
	}
}

// forPass is the list's references for a pass, after writing the agent's
// list back over its file if someone edited it; those in does not name are
// only kept. The list is loaded.
func (l *ownList) forPass(in map[string]bool) pass.PeerRefs {
	l.restoreFile()
	first := strings.Count(l.header, "\n")
	out := pass.PeerRefs{Known: true, Keep: map[string]bool{}}
	for i, ref := range l.refs {
		out.Entries = append(out.Entries, source.PullEntry{Ref: ref, Line: first + i + 1})
		if !in[ref] {
			out.Keep[ref] = true
		}
	}
	return out
}

// listed says whether ref is on the list as last written.
func (l *ownList) listed(ref string) bool {
	_, ok := slices.BinarySearch(l.refs, ref)
	return ok
}

// readBounded reads up to limit bytes of the file at path.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

// readPeerList reads the references of the list of kind peers at path;
// none if it does not exist.
func readPeerList(path string) ([]string, error) {
	l, err := source.ReadPeerList(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	refs := make([]string, 0, len(l.Entries))
	for _, e := range l.Entries {
		refs = append(refs, e.Ref)
	}
	slices.Sort(refs)
	return refs, nil
}

// writeList replaces the list at path with header and refs, or removes it
// when there are none. The directory it lies in is never a symlink, and
// (unless insecurePerms) no user but root and holdfast's can change it or
// a directory above it: no write follows a link someone else placed.
func writeList(path, header string, refs []string, insecurePerms bool) error {
	if len(refs) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if fi, err := os.Lstat(dir); err != nil {
		return err
	} else if fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("the list's directory %s is a symlink, not followed", dir)
	}
	if !insecurePerms {
		if err := files.CheckPerms("the list's directory", dir, os.Geteuid()); err != nil {
			return err
		}
	}
	return files.WriteFile(path, listText(header, refs), 0o644)
}

// listText is a list's file as the agent writes it.
func listText(header string, refs []string) []byte {
	var b strings.Builder
	b.WriteString(header)
	for _, ref := range refs {
		fmt.Fprintln(&b, ref)
	}
	return []byte(b.String())
}
