package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/holdfast-project/holdfast/internal/testenv"
)

// On a full data dir, pin and unpin fail naming the list and the cause, print
// no success line, and leave the list as it was: what they say is done is
// durably written first.
func TestPinOnFullDataDir(t *testing.T) {
	testenv.RequireRoot(t, "mounts a small tmpfs as a data dir and fills it")
	dd := t.TempDir()
	if err := syscall.Mount("tmpfs", dd, "tmpfs", 0, "size=256k"); err != nil {
		t.Fatalf("mounting a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dd, syscall.MNT_DETACH) })
	if _, errOut, code := holdfast(t, "pin", "--data-dir", dd, "example.com/kept"); code != 0 {
		t.Fatalf("pin before the disk is full: exit %d\n%s", code, errOut)
	}
	before := readPins(t, dd)
	// Fill what is left.
	f, err := os.Create(filepath.Join(dd, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	f.Close()
	for _, args := range [][]string{{"pin", "example.com/new"}, {"unpin", "example.com/kept"}} {
		out, errOut, code := holdfast(t, append([]string{args[0], "--data-dir", dd}, args[1:]...)...)
		if code == 0 || strings.Contains(out, args[0]+"ned") || !strings.Contains(errOut, pinsFile(dd)) || !strings.Contains(errOut, "no space left on device") {
			t.Errorf("%s on a full data dir: exit %d, stdout %q, stderr %q; want a failure naming %s and the cause, and no success line", args[0], code, out, errOut, pinsFile(dd))
		}
		if got := readPins(t, dd); got != before {
			t.Errorf("%s on a full data dir changed the list:\n%s\nwant\n%s", args[0], got, before)
		}
	}
}
