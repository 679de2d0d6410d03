package embedded

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// unmount unmounts path, lazily (MNT_DETACH) if a plain unmount fails while
// the path is still a mount point. A path that is no longer mounted is fine.
func unmount(path string) error {
	err := unix.Unmount(path, 0)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if derr := unix.Unmount(path, unix.MNT_DETACH); derr != nil &&
		!errors.Is(derr, unix.EINVAL) && !errors.Is(derr, unix.ENOENT) {
		return fmt.Errorf("unmounting %s: %w", path, errors.Join(err, derr))
	}
	return nil
}

// unmountUnder unmounts every mount point at or below one of dirs, deepest
// first, repeating while mounts remain (stacked mounts) up to a few rounds.
func unmountUnder(dirs ...string) error {
	var errs []error
	for range 8 {
		points, err := mountPointsUnder(dirs...)
		if err != nil {
			return err
		}
		if len(points) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, p := range points {
			if err := unmount(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	points, err := mountPointsUnder(dirs...)
	if err != nil {
		return err
	}
	if len(points) == 0 {
		return nil
	}
	return fmt.Errorf("mounts left under %s: %s: %w",
		strings.Join(dirs, ", "), strings.Join(points, ", "), errors.Join(errs...))
}

// mountPointsUnder lists the mount points at or below one of dirs from
// /proc/self/mountinfo, deepest first.
func mountPointsUnder(dirs ...string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading mount table: %w", err)
	}
	all, err := parseMountPoints(b)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range all {
		for _, d := range dirs {
			d = filepath.Clean(d)
			if p == d || strings.HasPrefix(p, d+"/") {
				out = append(out, p)
				break
			}
		}
	}
	slices.SortStableFunc(out, func(a, b string) int {
		return strings.Count(b, "/") - strings.Count(a, "/")
	})
	return slices.Compact(out), nil
}

// parseMountPoints returns the mount point (fifth field) of every line of a
// mountinfo table, with the kernel's octal escapes (\040 for a space, ...)
// decoded.
func parseMountPoints(b []byte) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		out = append(out, unescapeMountPath(fields[4]))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading mount table: %w", err)
	}
	return out, nil
}

func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
