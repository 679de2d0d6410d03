package server

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/holdfast-project/holdfast/internal/files"
)

const (
	// tokenBytes is how much randomness a token made here holds.
	tokenBytes = 32
	// minToken and maxTokenFile bound a token an operator gives.
	minToken     = 32
	maxTokenFile = 4 << 10
)

// LoadToken reads the token of the agent's own reporter (see Owner) from
// path. When there is no file there it makes one first: 32 random bytes as
// hex, written into a new file (never through a link, never over another
// file), mode 0640 when holdfast runs with root's group, so that a reporter
// given root's group reads it, else 0600.
//
// The file is refused, as a loose pull list is, when a user but root and
// holdfast's own may change it or a directory above it (files.CheckPerms);
// and, since whoever reads it may change what the node keeps, also when
// others may read it, or its group unless that is root's. It is opened
// without following a symlink. insecurePerms skips the checks of owner and
// mode (--insecure-perms).
func LoadToken(path string, insecurePerms bool) (string, error) {
	if err := makeToken(path, ""); err != nil {
		return "", err
	}
	if !insecurePerms {
		if err := files.CheckPerms("token file", path, os.Geteuid()); err != nil {
			return "", err
		}
	}
	f, err := files.OpenNoFollow(path)
	if errors.Is(err, unix.ELOOP) {
		return "", fmt.Errorf("token file %s is a symbolic link: give the file itself", path)
	}
	if err != nil {
		return "", fmt.Errorf("reading token file %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("reading token file %s: %w", path, err)
	}
	if why := readableBy(fi); why != "" && !insecurePerms {
		return "", fmt.Errorf("token file %s is %s; %s", path, why, files.InsecurePermsHint)
	}
	data, err := files.ReadAll(f, maxTokenFile)
	if errors.Is(err, files.ErrTooLarge) {
		return "", fmt.Errorf("reading token file %s: larger than %d bytes, more than a token may have", path, maxTokenFile)
	}
	if err != nil {
		return "", fmt.Errorf("reading token file %s: %w", path, err)
	}
	token := strings.TrimSpace(string(data))
	if len(token) < minToken || strings.IndexFunc(token, func(c rune) bool { return c < '!' || c > '~' }) >= 0 {
		return "", fmt.Errorf("token file %s: a token is %d or more printable ASCII characters without spaces (holdfast makes one of %d hex digits when the file is missing)",
			path, minToken, 2*tokenBytes)
	}
	return token, nil
}

// RestoreToken writes token to path when nothing is there, as LoadToken
// makes a new one: for an agent whose data dir was deleted under it, so that
// its reporter reads the token the agent still takes.
func RestoreToken(path, token string) error {
	return makeToken(path, token)
}

// makeToken writes token (a new random one when empty) to path when nothing
// is there (and the directories above it, mode 0755, when missing); a file, a
// directory or a link already there (dangling or not) is left alone.
func makeToken(path, token string) error {
	mode := uint32(0o600)
	if os.Getegid() == 0 {
		mode = 0o640
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("making token file %s: %w", path, err)
	}
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("making token file %s: %w", path, &fs.PathError{Op: "open", Path: path, Err: err})
	}
	f := os.NewFile(uintptr(fd), path)
	if token == "" {
		raw := make([]byte, tokenBytes)
		_, _ = rand.Read(raw) // never fails (crypto/rand)
		token = hex.EncodeToString(raw)
	}
	err = f.Chmod(fs.FileMode(mode)) // the mode whatever the umask
	if err == nil {
		_, err = f.WriteString(token + "\n")
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("making token file %s: %w", path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// readableBy says who besides the owner and root's group may read fi, or "".
func readableBy(fi fs.FileInfo) string {
	perm := fi.Mode().Perm()
	if perm&0o004 != 0 {
		return fmt.Sprintf("readable by others (mode %04o)", perm)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && perm&0o040 != 0 && st.Gid != 0 {
		return fmt.Sprintf("readable by group %d (mode %04o)", st.Gid, perm)
	}
	return ""
}
