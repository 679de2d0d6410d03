// Package source finds holdfast's sources in the images directories: archive
// files, OCI layout directories, pull lists (*.txt) and pin lists (*.pins).
package source

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/holdfast-project/holdfast/internal/archive"
)

// Kind is what a source is.
type Kind string

const (
	Archive  Kind = "archive"   // a file: tar, plain or compressed
	OCIDir   Kind = "oci-dir"   // a directory holding an oci-layout file
	PullList Kind = "pull-list" // *.txt
	PinList  Kind = "pin-list"  // *.pins
)

// Source is one thing in an images directory that yields images.
type Source struct {
	Path     string
	Kind     Kind
	Identity string // size, mtime, inode and ctime: changes whenever the content may have
	Size     int64
	MtimeNs  int64
}

// Skipped is a file that is not a source, with the reason.
type Skipped struct {
	Path   string
	Reason string
}

// Result is what a scan found.
type Result struct {
	Dirs    []string // the images dirs scanned: sources elsewhere are not this scan's to judge
	Sources []Source
	Skipped []Skipped
	Errors  []error // directories or files that could not be read
	// Unreadable are the paths (directories or files) whose sources are unknown
	// this time: what holdfast has from them must be kept as it is.
	Unreadable []string
}

// Scan walks each images directory recursively. A directory with an
// oci-layout file is one source and is not descended into. Dotfiles and
// temporary names are skipped; other files are classified by their bytes.
func Scan(dirs []string) Result {
	res := Result{Dirs: dirs}
	seen := map[string]bool{}
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				res.Errors = append(res.Errors, fmt.Errorf("reading %s: %w", path, cause(err)))
				res.Unreadable = append(res.Unreadable, path)
				if d != nil && d.IsDir() && path != dir {
					return fs.SkipDir
				}
				return nil
			}
			if path != dir && Ignored(d.Name()) {
				res.Skipped = append(res.Skipped, Skipped{Path: path, Reason: "hidden or temporary name"})
				if d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			if d.IsDir() {
				if _, err := os.Stat(filepath.Join(path, "oci-layout")); err == nil {
					if path == dir {
						res.Errors = append(res.Errors, fmt.Errorf("images dir %s is itself an OCI layout; put it in a subdirectory", dir))
						return fs.SkipDir
					}
					if src, err := identify(path, OCIDir); err != nil {
						res.Errors = append(res.Errors, err)
						res.Unreadable = append(res.Unreadable, path)
					} else if !seen[src.Path] {
						seen[src.Path] = true
						res.Sources = append(res.Sources, src)
					}
					return fs.SkipDir
				}
				return nil
			}
			if !d.Type().IsRegular() && d.Type()&fs.ModeSymlink == 0 {
				res.Skipped = append(res.Skipped, Skipped{Path: path, Reason: "not a regular file"})
				return nil
			}
			kind, reason, err := classify(path)
			if err != nil {
				res.Errors = append(res.Errors, err)
				res.Unreadable = append(res.Unreadable, path)
				return nil
			}
			if kind == "" {
				res.Skipped = append(res.Skipped, Skipped{Path: path, Reason: reason})
				return nil
			}
			src, err := identify(path, kind)
			if err != nil {
				res.Errors = append(res.Errors, err)
				res.Unreadable = append(res.Unreadable, path)
				return nil
			}
			if !seen[src.Path] {
				seen[src.Path] = true
				res.Sources = append(res.Sources, src)
			}
			return nil
		})
		if err != nil {
			res.Errors = append(res.Errors, fmt.Errorf("reading %s: %w", dir, err))
		}
	}
	sort.Slice(res.Sources, func(i, j int) bool { return res.Sources[i].Path < res.Sources[j].Path })
	return res
}

// Ignored reports whether a file or directory name is never a source: dotfiles
// and the names of files still being written.
func Ignored(name string) bool {
	if strings.HasPrefix(name, ".") || strings.HasSuffix(name, "~") {
		return true
	}
	for _, suffix := range []string{".tmp", ".partial", ".part"} {
		if strings.HasSuffix(name, suffix) {
			return true
		}
	}
	return false
}

// classify tells an archive from other files by its first bytes; lists by suffix.
func classify(path string) (Kind, string, error) {
	switch {
	case strings.HasSuffix(path, ".txt"):
		return PullList, "", nil
	case strings.HasSuffix(path, ".pins"):
		return PinList, "", nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", "", fmt.Errorf("reading %s: %w", path, cause(err))
	}
	defer f.Close()
	head := make([]byte, 512)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", "", fmt.Errorf("reading %s: %w", path, err)
	}
	head = head[:n]
	if c := archive.Sniff(head); c != archive.None {
		return Archive, "", nil
	}
	if isTarHeader(head) {
		return Archive, "", nil
	}
	return "", "not an archive", nil
}

// isTarHeader reports whether b starts with a ustar, GNU or PAX tar header.
func isTarHeader(b []byte) bool {
	return len(b) >= 263 && bytes.HasPrefix(b[257:], []byte("ustar"))
}

// identify stats a source. An OCI layout directory is identified by its index.json.
func identify(path string, kind Kind) (Source, error) {
	target := path
	if kind == OCIDir {
		target = filepath.Join(path, "index.json")
	}
	fi, err := os.Stat(target)
	if err != nil {
		return Source{}, fmt.Errorf("reading %s: %w", target, cause(err))
	}
	src := Source{Path: path, Kind: kind, Size: fi.Size(), MtimeNs: fi.ModTime().UnixNano()}
	var ino uint64
	var ctime int64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
		ctime = st.Ctim.Sec*1e9 + st.Ctim.Nsec
	}
	src.Identity = fmt.Sprintf("size=%d,mtime=%d,ino=%d,ctime=%d", src.Size, src.MtimeNs, ino, ctime)
	return src, nil
}

// cause drops the path from a *fs.PathError, which the caller names already.
func cause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
