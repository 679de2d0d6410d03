package source

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/testenv"
)

// TestScanPerms: an images dir, a directory above or in it, or a list that a
// user other than root and holdfast's own may change is refused with an error
// naming it and what is wrong; it counts as unreadable, and the other sources
// are still found. Sticky world-writable dirs above (as /tmp) are accepted,
// a group-writable dir whose group is root's too; --insecure-perms reads all.
func TestScanPerms(t *testing.T) {
	testenv.RequireRoot(t, "chown to another user")
	t.Parallel()
	const other = 1000
	type env struct{ base, images, good string }
	setup := func(t *testing.T) env {
		base := t.TempDir()
		e := env{base: base, images: filepath.Join(base, "images"), good: filepath.Join(base, "good")}
		for _, d := range []string{e.images, e.good} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, "list.txt"), []byte("nginx\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return e
	}
	chmod := func(t *testing.T, p string, m os.FileMode) {
		if err := os.Chmod(p, m); err != nil {
			t.Fatal(err)
		}
	}
	chown := func(t *testing.T, p string, uid, gid int) {
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, e env) string // returns the path refused, "" for none
		want    string
	}{
		{"group-writable images dir", func(t *testing.T, e env) string {
			chown(t, e.images, 0, other)
			chmod(t, e.images, 0o775)
			return e.images
		}, "images dir %s is writable by group 1000 (mode 0775); fix the mode or owner, or pass --insecure-perms"},
		{"world-writable images dir", func(t *testing.T, e env) string {
			chmod(t, e.images, 0o777)
			return e.images
		}, "images dir %s is writable by others (mode 0777)"},
		{"sticky world-writable images dir", func(t *testing.T, e env) string {
			chmod(t, e.images, 0o777|os.ModeSticky)
			return e.images
		}, "images dir %s is writable by others (mode 0777)"},
		{"images dir of another user", func(t *testing.T, e env) string {
			chown(t, e.images, other, other)
			return e.images
		}, "images dir %s is owned by uid 1000, not root or holdfast's uid 0"},
		{"group-writable parent", func(t *testing.T, e env) string {
			parent := filepath.Join(e.base, "shared")
			if err := os.Mkdir(parent, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(e.images, filepath.Join(parent, "images")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(parent, "images"), e.images); err != nil {
				t.Fatal(err)
			}
			chown(t, parent, 0, other)
			chmod(t, parent, 0o775)
			return e.images
		}, "images dir %s (" + "REAL" + "): directory SHARED is writable by group 1000 (mode 0775)"},
		{"writable subdirectory", func(t *testing.T, e env) string {
			sub := filepath.Join(e.images, "team")
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			chmod(t, sub, 0o757)
			return sub
		}, "images dir IMAGES: directory %s is writable by others (mode 0757)"},
		{"world-writable pull list", func(t *testing.T, e env) string {
			p := filepath.Join(e.images, "list.txt")
			chmod(t, p, 0o666)
			return p
		}, "pull list %s is writable by others (mode 0666)"},
		{"pin list of another user", func(t *testing.T, e env) string {
			p := filepath.Join(e.images, "local.pins")
			if err := os.WriteFile(p, []byte("nginx\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			chown(t, p, other, other)
			return p
		}, "pin list %s is owned by uid 1000"},
		{"group-writable, group root", func(t *testing.T, e env) string {
			chown(t, e.images, 0, 0)
			chmod(t, e.images, 0o775)
			return ""
		}, ""},
		{"sticky world-writable parent", func(t *testing.T, e env) string {
			chmod(t, e.base, 0o777|os.ModeSticky)
			return ""
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			refused := tc.prepare(t, e)
			res := ScanWith([]string{e.images, e.good}, ScanOptions{UID: 0, UIDSet: true})
			goodList := filepath.Join(e.good, "list.txt")
			if !slices.ContainsFunc(res.Sources, func(s Source) bool { return s.Path == goodList }) {
				t.Fatalf("the source of the other dir was not found: %+v, errors %v", res.Sources, res.Errors)
			}
			if refused == "" {
				if len(res.Errors) != 0 {
					t.Fatalf("refused: %v", res.Errors)
				}
				return
			}
			want := strings.ReplaceAll(tc.want, "%s", refused)
			want = strings.ReplaceAll(want, "IMAGES", e.images)
			want = strings.ReplaceAll(want, "SHARED", filepath.Join(e.base, "shared"))
			want = strings.ReplaceAll(want, "REAL", filepath.Join(e.base, "shared", "images"))
			if len(res.Errors) != 1 || !strings.Contains(res.Errors[0].Error(), want) {
				t.Fatalf("errors %v; want one containing %q", res.Errors, want)
			}
			if !slices.Contains(res.Unreadable, refused) {
				t.Errorf("%s is not unreadable: %v", refused, res.Unreadable)
			}
			for _, s := range res.Sources {
				if strings.HasPrefix(s.Path, refused) {
					t.Errorf("source %s of the refused %s was read", s.Path, refused)
				}
			}
			res = ScanWith([]string{e.images, e.good}, ScanOptions{UID: 0, UIDSet: true, InsecurePerms: true})
			if len(res.Errors) != 0 {
				t.Fatalf("with InsecurePerms: %v", res.Errors)
			}
		})
	}
}

// TestScanPermsSpoolDir: a spool dir is checked as an images dir is, and
// named as a spool dir.
func TestScanPermsSpoolDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o757); err != nil {
		t.Fatal(err)
	}
	res := ScanWith([]string{dir}, ScanOptions{What: "spool dir"})
	want := "spool dir " + dir + " is writable by others (mode 0757)"
	if len(res.Errors) != 1 || !strings.Contains(res.Errors[0].Error(), want) {
		t.Fatalf("errors %v, want %q", res.Errors, want)
	}
}
