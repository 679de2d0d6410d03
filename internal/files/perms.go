package files

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// InsecurePermsHint ends every refusal of CheckPerms.
const InsecurePermsHint = "fix the mode or owner, or pass --insecure-perms (HOLDFAST_INSECURE_PERMS=true)"

// CheckPerms checks, as sshd's StrictModes does, that no user but root and
// uid can change what path holds: path (after symlinks) and every directory
// above it up to / must be owned by root or uid, and writable by neither its
// group (unless the group is root's, gid 0) nor others. Two exceptions:
// anything on a read-only mount passes; and a directory above path with the
// sticky bit (/tmp) may be writable by anyone, as there only an entry's owner
// can rename or remove it and the entry below is checked for its owner in
// turn. path itself gets no sticky leave: an images dir's archives are not
// checked for their owner. what names path in the error ("images dir"):
//
//	images dir /x is writable by group 1000 (mode 0775); fix the mode ...
//	pull list /x/a.txt: directory /x is owned by uid 1000, not root or holdfast's uid 0; fix ...
//
// A path that does not resolve is not refused here: reading it reports that.
func CheckPerms(what, path string, uid int) error {
	_, err := CheckResolved(what, path, uid)
	return err
}

// CheckResolved is CheckPerms, returning also the path it judged: path with
// every symlink resolved, made absolute ("" when path does not resolve). To
// read what was judged, read that path, not path: no other user can change
// it, while a symlink on the way to it may lie in a directory they can
// write, and point elsewhere by the time path is opened.
func CheckResolved(what, path string, uid int) (string, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", nil
	}
	real, err = filepath.Abs(real)
	if err != nil {
		return "", nil
	}
	shown := path
	if real != filepath.Clean(path) {
		shown = path + " (" + real + ")"
	}
	for p := real; ; p = filepath.Dir(p) {
		fi, err := os.Lstat(p)
		if err != nil {
			// It went after it resolved: judge it again when it stays.
			return "", fmt.Errorf("%s %s: %w", what, shown, err)
		}
		if why := Untrusted(p, fi, uid, p != real); why != "" {
			if p == real {
				return "", fmt.Errorf("%s %s is %s; %s", what, shown, why, InsecurePermsHint)
			}
			return "", fmt.Errorf("%s %s: directory %s is %s; %s", what, shown, p, why, InsecurePermsHint)
		}
		if p == filepath.Dir(p) {
			return real, nil
		}
	}
}

// Untrusted says who besides root and uid can change fi, or "". sticky
// accepts a directory with the sticky bit whoever may write it: right for a
// directory above the path checked (whose next element is checked for its
// owner), never for an images dir itself, whose archives are not.
//
// Nothing on a read-only mount (an ISO, a USB stick, a read-only tmpfs) can
// be changed by anyone without remounting it, which takes root: it is safe
// whatever its mode and owner.
func Untrusted(path string, fi fs.FileInfo, uid int, sticky bool) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	var sfs unix.Statfs_t
	if unix.Statfs(path, &sfs) == nil && sfs.Flags&unix.ST_RDONLY != 0 {
		return ""
	}
	mode := fi.Mode()
	perm := uint32(mode.Perm())
	if st.Uid != 0 && int(st.Uid) != uid {
		return fmt.Sprintf("owned by uid %d, not root or holdfast's uid %d", st.Uid, uid)
	}
	if sticky && mode.IsDir() && mode&fs.ModeSticky != 0 {
		return ""
	}
	if perm&0o002 != 0 {
		return fmt.Sprintf("writable by others (mode %04o)", perm)
	}
	if perm&0o020 != 0 && st.Gid != 0 {
		return fmt.Sprintf("writable by group %d (mode %04o)", st.Gid, perm)
	}
	return ""
}
