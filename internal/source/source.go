// Package source finds holdfast's sources in the images directories: archive
// files (whole or split into parts), OCI layout directories, pull lists
// (*.txt) and pin lists (*.pins), and edits a pin list in place (PinFile,
// for holdfast pin and unpin).
package source

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/holdfast-project/holdfast/internal/archive"
	"github.com/holdfast-project/holdfast/internal/files"
	"github.com/holdfast-project/holdfast/internal/lineerr"
)

// Kind is what a source is.
type Kind string

const (
	Archive  Kind = "archive"   // a file, or the parts of a split one: tar, plain or compressed
	OCIDir   Kind = "oci-dir"   // a directory holding an oci-layout file, or index.json and blobs/
	PullList Kind = "pull-list" // *.txt
	PinList  Kind = "pin-list"  // *.pins
)

// Source is one thing in an images directory that yields images.
type Source struct {
	// Path names the source. For a split bundle it is the bundle's name
	// without the part suffix (/images/haul.tar.zst), a path that need not
	// exist as a file.
	Path     string
	Kind     Kind
	Identity string // size, mtime, inode and ctime (a split bundle's: of every part, hashed): changes whenever the content may have
	Size     int64  // bytes to read: of a split bundle, of its parts joined
	MtimeNs  int64  // of a split bundle, its newest part's
	// Parts are the files of a split bundle, in order (see split.go); a
	// Zarf set's .part000 (its part list) comes first and is not part of
	// the joined bytes. Empty for any other source.
	Parts []string
	// Incomplete says why Parts do not make the whole bundle (a part
	// missing, a part list that does not match); "" when they do.
	Incomplete string
}

// Skipped is a file that is not a source, with the reason.
type Skipped struct {
	Path   string
	Reason string
}

// Marker is the file holdfast keeps in each images dir it has found sources
// in. A dir that lacks it, holds no source, and from which holdfast still
// leases sources is taken for a volume not mounted (yet), not for a dir
// emptied on purpose: see the agent. A dotfile, so no scan reads it.
const Marker = ".holdfast-images"

// ErrNotRegular is the cause Open gives for anything but a regular file.
var ErrNotRegular = archive.ErrNotRegular

// Result is what a scan found.
type Result struct {
	Dirs    []string // the images dirs scanned: sources elsewhere are not this scan's to judge
	Sources []Source
	Skipped []Skipped
	Errors  []error // directories or files that could not be read
	// Unreadable are the paths (directories or files) whose sources are unknown
	// this time: what holdfast has from them must be kept as it is.
	Unreadable []string
	// Links maps each images dir reached through a symlink to the directory
	// read. Sources are named under the dir as given.
	Links map[string]string
	// Unmarked are the images dirs read that lack the Marker file though it
	// could be written there: a dir this process cannot write to (read-only,
	// another user's) never gets one, so its lack says nothing.
	Unmarked []string
}

// Scan walks each images directory recursively. An images dir that is a
// symlink is read through it; sources are named under the path given. A
// directory with an oci-layout file, or with index.json and blobs/, is one
// source and is not descended into. The parts of a split archive in one
// directory are one source (see split.go).
// Dotfiles and temporary names are skipped, and so is anything that is not a
// regular file or a directory (a named pipe, a device, a symlink to one):
// none of them is ever opened. A symlink to a directory is not followed (an
// error). Other files are classified by their bytes.
func Scan(dirs []string) Result { return ScanWith(dirs, ScanOptions{}) }

// ScanWith is Scan with options. Unless opts.InsecurePerms, an images dir,
// a directory in it or a list that a user other than root and holdfast's own
// may change (files.CheckPerms) is refused: an error naming it and what is wrong,
// and it counts as unreadable (what holdfast has from it is kept).
func ScanWith(dirs []string, opts ScanOptions) Result {
	sc := scanner{res: Result{Dirs: dirs, Links: map[string]string{}}, seen: map[string]bool{}, opts: opts, uid: opts.uid()}
	for _, dir := range dirs {
		root, ok := sc.openDir(dir)
		if !ok {
			continue
		}
		sc.dir, sc.root, sc.groups = dir, root, map[string][]part{}
		if err := filepath.WalkDir(root, sc.visit); err != nil {
			sc.res.Errors = append(sc.res.Errors, fmt.Errorf("reading %s: %w", dir, err))
		}
		sc.res.addBundles(sc.groups, sc.seen)
	}
	res := sc.res
	sort.Slice(res.Sources, func(i, j int) bool { return res.Sources[i].Path < res.Sources[j].Path })
	return res
}

// scanner is one scan: what it found so far, and the images dir it walks.
type scanner struct {
	res  Result
	seen map[string]bool // source paths already found
	opts ScanOptions
	uid  int

	dir, root string            // the images dir as given, and where it resolved to
	groups    map[string][]part // split parts, by bundle path
}

// fail records an error about path, which counts as unreadable.
func (sc *scanner) fail(path string, err error) {
	sc.res.Errors = append(sc.res.Errors, err)
	sc.res.Unreadable = append(sc.res.Unreadable, path)
}

func (sc *scanner) skip(path, reason string) {
	sc.res.Skipped = append(sc.res.Skipped, Skipped{Path: path, Reason: reason})
}

func (sc *scanner) add(src Source) {
	if !sc.seen[src.Path] {
		sc.seen[src.Path] = true
		sc.res.Sources = append(sc.res.Sources, src)
	}
}

// openDir resolves an images dir and checks it; false when it cannot be
// scanned (the error is recorded).
func (sc *scanner) openDir(dir string) (string, bool) {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		sc.fail(dir, fmt.Errorf("reading %s: %w", dir, lineerr.Cause(err)))
		return "", false
	}
	if !sc.opts.InsecurePerms {
		if err := files.CheckPerms(sc.opts.what(), dir, sc.uid); err != nil {
			sc.fail(dir, err)
			return "", false
		}
	}
	if root != filepath.Clean(dir) {
		sc.res.Links[dir] = root
	}
	if _, err := os.Lstat(filepath.Join(root, Marker)); errors.Is(err, fs.ErrNotExist) && unix.Access(root, unix.W_OK) == nil {
		sc.res.Unmarked = append(sc.res.Unmarked, dir)
	}
	return root, true
}

// visit is the walk of one images dir: each entry named under the dir as
// given, read where it resolved to.
func (sc *scanner) visit(real string, d fs.DirEntry, err error) error {
	path := filepath.Join(sc.dir, strings.TrimPrefix(real, sc.root))
	isRoot := real == sc.root
	if err != nil {
		sc.fail(path, fmt.Errorf("reading %s: %w", path, lineerr.Cause(err)))
		if d != nil && d.IsDir() && !isRoot {
			return fs.SkipDir
		}
		return nil
	}
	if !isRoot && Ignored(d.Name()) {
		sc.skip(path, "hidden or temporary name")
		if d.IsDir() {
			return fs.SkipDir
		}
		return nil
	}
	if d.IsDir() {
		return sc.visitDir(real, path, d, isRoot)
	}
	sc.visitFile(path, d)
	return nil
}

// visitDir checks a directory's permissions and takes an OCI layout dir as
// one source, not descended into.
func (sc *scanner) visitDir(real, path string, d fs.DirEntry, isRoot bool) error {
	if !isRoot && !sc.opts.InsecurePerms {
		if fi, err := d.Info(); err == nil {
			if why := files.Untrusted(real, fi, sc.uid, false); why != "" {
				sc.fail(path, fmt.Errorf("%s %s: directory %s is %s; %s", sc.opts.what(), sc.dir, path, why, files.InsecurePermsHint))
				return fs.SkipDir
			}
		}
	}
	if !isLayout(real) {
		return nil
	}
	if isRoot {
		sc.res.Errors = append(sc.res.Errors, fmt.Errorf("images dir %s is itself an OCI layout; put it in a subdirectory", sc.dir))
		return fs.SkipDir
	}
	if src, err := identify(path, OCIDir); err != nil {
		sc.fail(path, err)
	} else {
		sc.add(src)
	}
	return fs.SkipDir
}

// visitFile classifies a file: a split part joins its group, an archive or
// a list becomes a source, anything else is skipped or an error.
func (sc *scanner) visitFile(path string, d fs.DirEntry) {
	if reason, err := notRegular(path, d); err != nil {
		sc.fail(path, err)
		if base, _, ok := parsePart(d.Name()); ok {
			// What holdfast has from the split archive stays too.
			sc.res.Unreadable = append(sc.res.Unreadable, filepath.Join(filepath.Dir(path), base))
		}
		return
	} else if reason != "" {
		sc.skip(path, reason)
		return
	}
	if base, p, ok := parsePart(d.Name()); ok && isPart(path, p) {
		p.path = path
		bundle := filepath.Join(filepath.Dir(path), base)
		sc.groups[bundle] = append(sc.groups[bundle], p)
		return
	}
	kind, reason, err := classify(path)
	if err != nil {
		sc.fail(path, err)
		return
	}
	if kind == "" {
		sc.skip(path, reason)
		return
	}
	if (kind == PullList || kind == PinList) && !sc.opts.InsecurePerms {
		if err := files.CheckPerms(strings.ReplaceAll(string(kind), "-", " "), path, sc.uid); err != nil {
			sc.fail(path, err)
			return
		}
	}
	src, err := identify(path, kind)
	if err != nil {
		sc.fail(path, err)
		return
	}
	sc.add(src)
}

// notRegular says why a directory entry that is not a directory is no
// source, or "" for a regular file (or a symlink to one). It only stats: a
// named pipe or a device is never opened, as an open of one may block. A
// symlink to a directory is not followed, and is an error rather than a skip:
// what it held before is unknown, not gone.
func notRegular(path string, d fs.DirEntry) (string, error) {
	mode := d.Type()
	link := mode&fs.ModeSymlink != 0
	if link {
		fi, err := os.Stat(path)
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", path, lineerr.Cause(err))
		}
		mode = fi.Mode().Type()
	}
	if mode.IsRegular() {
		return "", nil
	}
	what := "a special file"
	switch {
	case mode.IsDir():
		return "", fmt.Errorf("reading %s: a symlink to a directory, not followed", path)
	case mode&fs.ModeNamedPipe != 0:
		what = "a named pipe"
	case mode&fs.ModeSocket != 0:
		what = "a socket"
	case mode&fs.ModeDevice != 0:
		what = "a device"
	}
	if link {
		return "not a regular file: a symlink to " + what, nil
	}
	return "not a regular file: " + what, nil
}

// Open opens a regular file for reading without blocking: see archive.Open.
func Open(path string) (*os.File, error) { return archive.Open(path) }

// readFileLimit reads a regular file of at most limit bytes (files.ReadFile); a larger one
// is an error that gives the bound.
func readFileLimit(path string, limit int64) ([]byte, error) {
	b, err := files.ReadFile(path, limit)
	if errors.Is(err, files.ErrTooLarge) {
		return nil, fmt.Errorf("larger than %d MiB, more than a list may have", limit>>20)
	}
	return b, err
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
	f, err := Open(path)
	if errors.Is(err, ErrNotRegular) {
		return "", "not a regular file", nil // swapped since the walk
	}
	if err != nil {
		return "", "", fmt.Errorf("reading %s: %w", path, lineerr.Cause(err))
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
	if archive.IsTarHeader(head) || ArchiveName(path) {
		// A file named as an archive is one the operator meant as one:
		// empty, cut short or garbage, its import fails naming the cause.
		return Archive, "", nil
	}
	return "", "not an archive", nil
}

// archiveSuffixes are the names archive writers give (DESIGN decision 9).
var archiveSuffixes = []string{".tar", ".tgz", ".tar.gz", ".tar.zst", ".tzst", ".tar.bz2", ".tbz", ".tbz2", ".tar.xz", ".txz", ".tar.lz4"}

// ArchiveName reports whether a file's name says it is an archive: one of
// archiveSuffixes, or a split part of one (name.tar.zst.001, name.tar.part001).
func ArchiveName(path string) bool {
	name := strings.ToLower(filepath.Base(path))
	if i := strings.LastIndexByte(name, '.'); i > 0 {
		part := strings.TrimPrefix(name[i+1:], "part")
		if part != "" && strings.Trim(part, "0123456789") == "" {
			name = name[:i]
		}
	}
	for _, suffix := range archiveSuffixes {
		if strings.HasSuffix(name, suffix) {
			return true
		}
	}
	return false
}

// isLayout reports whether dir is an OCI image layout: it holds an
// oci-layout file, or index.json and a blobs directory (Hauler's
// --containerd store has no oci-layout).
func isLayout(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err == nil {
		return true
	}
	fi, err := os.Stat(filepath.Join(dir, "index.json"))
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	fi, err = os.Stat(filepath.Join(dir, "blobs"))
	return err == nil && fi.IsDir()
}

// identify stats a source. An OCI layout directory is identified by its index.json.
func identify(path string, kind Kind) (Source, error) {
	target := path
	if kind == OCIDir {
		target = filepath.Join(path, "index.json")
	}
	fi, err := os.Stat(target)
	if err != nil {
		return Source{}, fmt.Errorf("reading %s: %w", target, lineerr.Cause(err))
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
