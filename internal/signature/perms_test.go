package signature

import (
	"crypto/elliptic"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/testenv"
)

// permsHint ends every refusal of a file others may change.
const permsHint = "; fix the mode or owner, or pass --insecure-perms (HOLDFAST_INSECURE_PERMS=true)"

// permsSetup is a policy with a key rule and a keyless rule, laid out as
// root lays it out: keys/k1.pub, roots/trusted_root.json and policy.yaml,
// files 0644 and dirs 0755.
type permsSetup struct {
	dir, policy, keys, key, root string
}

func newPermsSetup(t *testing.T) permsSetup {
	t.Helper()
	dir := t.TempDir()
	s := permsSetup{dir: dir, policy: filepath.Join(dir, "policy.yaml"), keys: filepath.Join(dir, "keys")}
	s.key = filepath.Join(s.keys, "k1.pub")
	s.root = filepath.Join(dir, "roots", "trusted_root.json")
	writeKey(t, s.key, &ecdsaKey(t, elliptic.P256()).PublicKey)
	write(t, s.root, trustedRoot)
	write(t, s.policy, `mode: enforce
rules:
  - images: ["registry.example.com/platform/*"]
    keys: [keys/k1.pub]
  - images: ["*"]
    keyless:
      trustedRoot: roots/trusted_root.json
      identities: [{issuer: "https://accounts.example.com", subject: "release@example.com"}]
`)
	return s
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// TestLoadTrustFilePerms: the policy file, a key and a trusted root that a
// user other than root and holdfast's own may change, or that lie in a
// directory such a user may change, are refused as pin lists are, each with
// an error naming the file and what is wrong (a key or trusted root at the
// policy's line naming it); a symlink is judged by the file it resolves to
// and that file's directories. --insecure-perms reads them all the same.
func TestLoadTrustFilePerms(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, s permsSetup) string // the error wanted
	}{
		{"key writable by others", func(t *testing.T, s permsSetup) string {
			chmod(t, s.key, 0o666)
			return s.policy + ":4: key " + s.key + " is writable by others (mode 0666)" + permsHint
		}},
		{"key in a directory writable by others", func(t *testing.T, s permsSetup) string {
			chmod(t, s.keys, 0o777)
			return s.policy + ":4: key " + s.key + ": directory " + s.keys + " is writable by others (mode 0777)" + permsHint
		}},
		{"key in a sticky directory writable by others, itself writable by others", func(t *testing.T, s permsSetup) string {
			chmod(t, s.keys, 0o777|os.ModeSticky)
			chmod(t, s.key, 0o646)
			return s.policy + ":4: key " + s.key + " is writable by others (mode 0646)" + permsHint
		}},
		{"key symlinked to a file writable by others", func(t *testing.T, s permsSetup) string {
			target := filepath.Join(s.dir, "elsewhere", "k1.pub")
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(s.key, target); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, s.key); err != nil {
				t.Fatal(err)
			}
			chmod(t, target, 0o666)
			return s.policy + ":4: key " + s.key + " (" + target + ") is writable by others (mode 0666)" + permsHint
		}},
		{"trusted root writable by others", func(t *testing.T, s permsSetup) string {
			chmod(t, s.root, 0o666)
			return s.policy + ":7: trustedRoot " + s.root + " is writable by others (mode 0666)" + permsHint
		}},
		{"trusted root in a directory writable by others", func(t *testing.T, s permsSetup) string {
			chmod(t, filepath.Dir(s.root), 0o777)
			return s.policy + ":7: trustedRoot " + s.root + ": directory " + filepath.Dir(s.root) + " is writable by others (mode 0777)" + permsHint
		}},
		{"policy file writable by others", func(t *testing.T, s permsSetup) string {
			chmod(t, s.policy, 0o666)
			chmod(t, s.key, 0o666) // not read: the policy file is refused whole
			return "policy file " + s.policy + " is writable by others (mode 0666)" + permsHint
		}},
		{"policy file in a directory writable by others", func(t *testing.T, s permsSetup) string {
			chmod(t, s.dir, 0o777)
			return "policy file " + s.policy + ": directory " + s.dir + " is writable by others (mode 0777)" + permsHint
		}},
		{"policy symlinked into a directory writable by others", func(t *testing.T, s permsSetup) string {
			open := filepath.Join(s.dir, "open")
			if err := os.Mkdir(open, 0o755); err != nil {
				t.Fatal(err)
			}
			chmod(t, open, 0o777)
			target := filepath.Join(open, "policy.yaml")
			if err := os.Rename(s.policy, target); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, s.policy); err != nil {
				t.Fatal(err)
			}
			return "policy file " + s.policy + " (" + target + "): directory " + open + " is writable by others (mode 0777)" + permsHint
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newPermsSetup(t)
			want := tc.prepare(t, s)
			p, err := Load(s.policy)
			if p != nil || err == nil || err.Error() != want {
				t.Fatalf("Load: policy read %v, error %v\nwant the error %s", p != nil, err, want)
			}
			var le LineError
			if strings.HasPrefix(want, s.policy+":") != errors.As(err, &le) {
				t.Errorf("error %v: a LineError is %v, want it for a key or trusted root only", err, errors.As(err, &le))
			}
			p, err = LoadWith(s.policy, Options{InsecurePerms: true})
			if err != nil || len(p.Rules) != 2 {
				t.Errorf("with InsecurePerms: error %v; want the policy read", err)
			}
		})
	}
}

// TestLoadTrustFileOfAnotherUser: a key, a trusted root or a policy file
// owned by a user other than root and holdfast's own is refused, whatever
// its mode.
func TestLoadTrustFileOfAnotherUser(t *testing.T) {
	testenv.RequireRoot(t, "chown the files to uid 65534")
	t.Parallel()
	const nobody = 65534
	for _, tc := range []struct {
		name string
		file func(s permsSetup) string
		want func(s permsSetup) string
	}{
		{"key", func(s permsSetup) string { return s.key }, func(s permsSetup) string {
			return s.policy + ":4: key " + s.key + " is owned by uid 65534, not root or holdfast's uid 0" + permsHint
		}},
		{"key dir", func(s permsSetup) string { return s.keys }, func(s permsSetup) string {
			return s.policy + ":4: key " + s.key + ": directory " + s.keys + " is owned by uid 65534, not root or holdfast's uid 0" + permsHint
		}},
		{"trusted root", func(s permsSetup) string { return s.root }, func(s permsSetup) string {
			return s.policy + ":7: trustedRoot " + s.root + " is owned by uid 65534, not root or holdfast's uid 0" + permsHint
		}},
		{"policy file", func(s permsSetup) string { return s.policy }, func(s permsSetup) string {
			return "policy file " + s.policy + " is owned by uid 65534, not root or holdfast's uid 0" + permsHint
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newPermsSetup(t)
			if err := os.Chown(tc.file(s), nobody, nobody); err != nil {
				t.Fatal(err)
			}
			if p, err := Load(s.policy); p != nil || err == nil || err.Error() != tc.want(s) {
				t.Errorf("Load: policy read %v, error %v\nwant the error %s", p != nil, err, tc.want(s))
			}
		})
	}
}

// TestLoadTrustFilesSafe: files 0644 and dirs 0755 owned by root (or by the
// user holdfast runs as) are read; so is a directory writable by root's
// group, a sticky world-writable directory above them (as /tmp), and a
// key symlinked from a directory others may write to a file they may not
// change, judged by that file; every mistake of a policy is reported,
// loose keys each at its line.
func TestLoadTrustFilesSafe(t *testing.T) {
	t.Parallel()
	s := newPermsSetup(t)
	if os.Geteuid() == 0 {
		for _, p := range []string{s.dir, s.keys, s.key, filepath.Dir(s.root), s.root, s.policy} {
			if err := os.Chown(p, 0, 0); err != nil {
				t.Fatal(err)
			}
		}
		chmod(t, s.keys, 0o775) // group root's
	}
	sticky := filepath.Join(s.dir, "sticky")
	if err := os.Mkdir(sticky, 0o755); err != nil {
		t.Fatal(err)
	}
	chmod(t, sticky, 0o777|os.ModeSticky)
	inner := filepath.Join(sticky, "inner")
	writeKey(t, filepath.Join(inner, "k2.pub"), &ecdsaKey(t, elliptic.P384()).PublicKey)
	open := filepath.Join(s.dir, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	chmod(t, open, 0o777)
	if err := os.Symlink(s.key, filepath.Join(open, "k3.pub")); err != nil {
		t.Fatal(err)
	}
	write(t, s.policy, `mode: enforce
rules:
  - images: ["registry.example.com/platform/*"]
    keys: [keys/k1.pub, sticky/inner/k2.pub, open/k3.pub]
  - images: ["*"]
    keyless:
      trustedRoot: roots/trusted_root.json
      identities: [{issuer: "https://accounts.example.com", subject: "release@example.com"}]
`)
	p, err := Load(s.policy)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Rules) != 2 || len(p.Rules[0].Keys) != 3 || p.Rules[0].Keys[2].Path != filepath.Join(open, "k3.pub") ||
		p.Rules[1].Keyless == nil || string(p.Rules[1].Keyless.TrustedRootJSON) != trustedRoot {
		t.Fatalf("loaded %+v", p)
	}

	chmod(t, s.key, 0o666)
	chmod(t, filepath.Join(inner, "k2.pub"), 0o666)
	_, err = Load(s.policy)
	want := s.policy + ":4: key " + s.key + " is writable by others (mode 0666)" + permsHint + "\n" +
		s.policy + ":4: key " + filepath.Join(inner, "k2.pub") + " is writable by others (mode 0666)" + permsHint + "\n" +
		s.policy + ":4: key " + filepath.Join(open, "k3.pub") + " (" + s.key + ") is writable by others (mode 0666)" + permsHint
	if err == nil || err.Error() != want {
		t.Errorf("three loose keys: %v\nwant\n%s", err, want)
	}
	if kept, err := Reload(p, s.policy, Options{}); kept != p || err == nil {
		t.Errorf("Reload with a loose key = %p, %v; want the last good policy %p and the error", kept, err, p)
	}
}
