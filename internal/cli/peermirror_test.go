package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPeerMirror: sync and run write the peer mirror's hosts.toml files
// into --registry-config only once they have connected to containerd: a
// command that cannot connect leaves no file. A bad mirror URL is a usage
// error naming the flag, and writes nothing.
func TestPeerMirror(t *testing.T) {
	dir := t.TempDir()
	regs := filepath.Join(dir, "certs.d")
	common := []string{"--address", filepath.Join(dir, "no.sock"), "--data-dir", filepath.Join(dir, "data"),
		"--images", filepath.Join(dir, "images"), "--registry-config", regs}

	_, errOut, code := holdfast(t, append([]string{"sync", "--peer-mirror", "ftp://10.0.0.5"}, common...)...)
	if code != 2 || !strings.Contains(errOut, "--peer-mirror") {
		t.Errorf("a bad --peer-mirror: exit %d\n%s", code, errOut)
	}
	if _, err := os.Stat(regs); !os.IsNotExist(err) {
		t.Errorf("a bad --peer-mirror wrote %s: %v", regs, err)
	}

	for _, cmd := range []string{"sync", "run"} {
		_, errOut, code = holdfast(t, append([]string{cmd, "--peer-mirror", "http://10.0.0.5:30020", "--peer-registries", "docker.io,ghcr.io"}, common...)...)
		if code == 0 || code == 2 {
			t.Errorf("%s without a containerd: exit %d, want 1\n%s", cmd, code, errOut)
		}
		if m, _ := filepath.Glob(filepath.Join(regs, "*", "hosts.toml")); len(m) != 0 {
			t.Errorf("%s without a containerd wrote %q", cmd, m)
		}
	}
}

// TestPeerRegistriesRefused: a --peer-registries entry that is not a host
// (a port out of range, 0, not a number) is a usage error naming the flag
// and the value, and never registries.yaml, which was not given.
func TestPeerRegistriesRefused(t *testing.T) {
	dir := t.TempDir()
	common := []string{"--address", filepath.Join(dir, "no.sock"), "--data-dir", filepath.Join(dir, "data"),
		"--images", filepath.Join(dir, "images"), "--registry-config", filepath.Join(dir, "certs.d"),
		"--peer-mirror", "http://10.0.0.5:30020"}
	for _, reg := range []string{"host:99999", "host:65536", "host:0", "host:http", "host:", "../etc"} {
		for _, cmd := range []string{"sync", "run"} {
			_, errOut, code := holdfast(t, append([]string{cmd, "--peer-registries", "docker.io," + reg}, common...)...)
			if code != 2 || !strings.Contains(errOut, "--peer-registries") || !strings.Contains(errOut, `"`+reg+`"`) || strings.Contains(errOut, "registries.yaml") {
				t.Errorf("%s --peer-registries docker.io,%s: exit %d; want 2 and an error naming --peer-registries and %q, not registries.yaml\n%s", cmd, reg, code, reg, errOut)
			}
		}
	}
}

// TestRegistriesYAMLPerms: a registries.yaml that users other than root and
// holdfast's own may change decides the node's mirrors and credentials, so
// sync and run refuse it (a usage error naming it, what is wrong and the way
// out) before they connect to containerd; --insecure-perms reads it.
func TestRegistriesYAMLPerms(t *testing.T) {
	dir := t.TempDir()
	regYAML := filepath.Join(dir, "registries.yaml")
	if err := os.WriteFile(regYAML, []byte("mirrors:\n  docker.io:\n    endpoint: [\"http://10.0.0.9:5000\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(regYAML, 0o666); err != nil {
		t.Fatal(err)
	}
	common := []string{"--address", filepath.Join(dir, "no.sock"), "--data-dir", filepath.Join(dir, "data"),
		"--images", filepath.Join(dir, "images"), "--registry-config", filepath.Join(dir, "certs.d"), "--registries-yaml", regYAML}
	want := "registries.yaml " + regYAML + " is writable by others (mode 0666); fix the mode or owner, or pass --insecure-perms"
	for _, cmd := range []string{"sync", "run"} {
		_, errOut, code := holdfast(t, append([]string{cmd}, common...)...)
		if code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("%s with a registries.yaml others may write: exit %d; want 2 and %q\n%s", cmd, code, want, errOut)
		}
		_, errOut, code = holdfast(t, append([]string{cmd, "--insecure-perms"}, common...)...)
		if code != 1 || !strings.Contains(errOut, "connecting to containerd") {
			t.Errorf("%s --insecure-perms: exit %d; want 1, from the missing containerd\n%s", cmd, code, errOut)
		}
	}
}
