package server

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestLoadTokenMade: with no file there, LoadToken makes one (64 hex digits,
// mode 0640 under root's group, else 0600) and reads the same token again;
// RestoreToken writes it back once the file is gone, and leaves a file that
// is there; another file's token is read as it is.
func TestLoadTokenMade(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	token, err := LoadToken(path, false)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(token) {
		t.Fatalf("made token %q, want 64 hex digits", token)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	want := os.FileMode(0o600)
	if os.Getegid() == 0 {
		want = 0o640
	}
	if fi.Mode() != want {
		t.Errorf("made mode %v, want %v", fi.Mode(), want)
	}
	again, err := LoadToken(path, false)
	if err != nil || again != token {
		t.Errorf("read again: %q, %v; want the token made", again, err)
	}
	// Gone (the data dir deleted under the agent): written back as it was.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := RestoreToken(path, token); err != nil {
		t.Fatal(err)
	}
	if again, err := LoadToken(path, false); err != nil || again != token {
		t.Errorf("restored: %q, %v; want the token made", again, err)
	}
	if err := RestoreToken(path, strings.Repeat("b", 64)); err != nil {
		t.Fatal(err)
	}
	if again, err := LoadToken(path, false); err != nil || again != token {
		t.Errorf("restored over a file: %q, %v; want the file left alone", again, err)
	}
	other := filepath.Join(dir, "given")
	if err := os.WriteFile(other, []byte("  "+strings.Repeat("Zq9-", 10)+"\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := LoadToken(other, false); err != nil || got != strings.Repeat("Zq9-", 10) {
		t.Errorf("a given token: %q, %v", got, err)
	}
}

// TestLoadTokenRefused: a token file that others may read or change, one
// reached through a symlink (the link's target is never made or read), and
// one that holds no usable token are errors naming the file and the cause;
// --insecure-perms reads a loose one anyway.
func TestLoadTokenRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := strings.Repeat("a1", 32) + "\n"
	write := func(name, data string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name, path, want string
		insecureOK       bool
	}{
		{"readable by others", write("others-read", good, 0o604), "is readable by others (mode 0604); fix the mode or owner", true},
		{"writable by others", write("others-write", good, 0o602), "is writable by others (mode 0602)", true},
		{"short", write("short", "abc\n", 0o600), "a token is 32 or more printable ASCII characters", false},
		{"spaces", write("spaces", strings.Repeat("ab", 20)+" x\n", 0o600), "a token is 32 or more", false},
		{"empty", write("empty", "", 0o600), "a token is 32 or more", false},
		{"too large", write("large", strings.Repeat("a", maxTokenFile+1), 0o600), "larger than 4096 bytes", false},
	}
	target := filepath.Join(dir, "target")
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	cases = append(cases, struct {
		name, path, want string
		insecureOK       bool
	}{"dangling symlink", link, "is a symbolic link", false})
	real := write("real", good, 0o600)
	link2 := filepath.Join(dir, "link2")
	if err := os.Symlink(real, link2); err != nil {
		t.Fatal(err)
	}
	cases = append(cases, struct {
		name, path, want string
		insecureOK       bool
	}{"symlink to a good file", link2, "is a symbolic link", false})
	if os.Geteuid() == 0 {
		g := write("group-read", good, 0o640)
		if err := os.Chown(g, 0, 1000); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct {
			name, path, want string
			insecureOK       bool
		}{"readable by group 1000", g, "is readable by group 1000 (mode 0640)", true})
		o := write("owned", good, 0o600)
		if err := os.Chown(o, 1000, 0); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct {
			name, path, want string
			insecureOK       bool
		}{"another user's", o, "is owned by uid 1000, not root", true})
		loose := filepath.Join(dir, "loose")
		if err := os.Mkdir(loose, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(loose, 0o777); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct {
			name, path, want string
			insecureOK       bool
		}{"in a world-writable dir", filepath.Join(loose, "token"), "directory " + loose + " is writable by others (mode 0777)", true})
	} else {
		t.Log("not root: the cases of another user's or group's file are left out (they need chown)")
	}
	for _, tc := range cases {
		got, err := LoadToken(tc.path, false)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("%s: %q, %v; want an error naming %s and %q", tc.name, got, err, tc.path, tc.want)
		}
		if got != "" {
			t.Errorf("%s: a token was read: %q", tc.name, got)
		}
		if _, err := LoadToken(tc.path, true); (err == nil) != tc.insecureOK {
			t.Errorf("%s with --insecure-perms: %v", tc.name, err)
		}
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("a token was made through the dangling link: %v", err)
	}
}
