package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPeerMirror: sync and run write the peer mirror's hosts.toml files
// into --registry-config before they touch containerd; a bad mirror URL is
// a usage error naming the flag, and writes nothing.
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
		for _, reg := range []string{"docker.io", "ghcr.io"} {
			b, err := os.ReadFile(filepath.Join(regs, reg, "hosts.toml"))
			if err != nil || !strings.Contains(string(b), `[host."http://10.0.0.5:30020"]`) {
				t.Errorf("%s: %s's hosts.toml: %v\n%s", cmd, reg, err, b)
			}
		}
		if err := os.RemoveAll(regs); err != nil {
			t.Fatal(err)
		}
	}
}
