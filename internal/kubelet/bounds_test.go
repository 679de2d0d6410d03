package kubelet

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDropInBounds: a drop-in (or the --config file) that is a symlink to
// /dev/zero, a named pipe with no writer, or a regular file far larger than
// any kubelet configuration is an error naming it and saying why, at once
// and in bounded memory: nothing is read without end and nothing waits for
// a writer. The drop-in before it is read as usual.
func TestDropInBounds(t *testing.T) {
	for name, tc := range map[string]struct {
		make func(t *testing.T, p string)
		want string
	}{
		"symlink to /dev/zero": {func(t *testing.T, p string) {
			if err := os.Symlink("/dev/zero", p); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file: a character device"},
		"named pipe": {func(t *testing.T, p string) {
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file: a named pipe"},
		"huge file": {func(t *testing.T, p string) {
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteString(header); err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(8 << 30); err != nil { // sparse: no disk taken
				t.Fatal(err)
			}
		}, "larger than 1 MiB, more than a kubelet configuration may have"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "00-defaults.conf"), []byte(header+"cgroupDriver: systemd\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			bad := filepath.Join(dir, "50-bad.conf")
			tc.make(t, bad)
			for _, paths := range [][]string{{dir}, {bad}} {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				done := make(chan error, 1)
				go func() { _, err := Load(paths); done <- err }()
				var err error
				select {
				case err = <-done:
				case <-time.After(20 * time.Second):
					runtime.ReadMemStats(&after)
					t.Fatalf("Load(%v) has not returned after 20s (%d MiB allocated)", paths, (after.TotalAlloc-before.TotalAlloc)>>20)
				}
				runtime.ReadMemStats(&after)
				if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("Load(%v): %v; want an error naming %s saying %q", paths, err, bad, tc.want)
				}
				if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
					t.Errorf("Load(%v) allocated %d MiB", paths, grew>>20)
				}
			}
		})
	}
}
