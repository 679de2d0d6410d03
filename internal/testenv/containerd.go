package testenv

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// Containerd16Config is the start of a config for Debian's containerd 1.6
// (version 2) kept under dir and serving sock (and sock.ttrpc): root, state
// and opt in dir; without cri its CRI plugin is disabled. Callers append their
// plugin tables.
func Containerd16Config(dir, sock string, cri bool) string {
	disabled := ""
	if !cri {
		disabled = "disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n"
	}
	return fmt.Sprintf(`version = 2
%sroot = %q
state = %q
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, disabled, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, sock+".ttrpc", filepath.Join(dir, "opt"))
}

// Containerd16CRIConfig is Containerd16Config with the CRI plugin on, as the
// tests and the bench run it: overlayfs, and CNI dirs under dir (empty: no
// pod networks).
func Containerd16CRIConfig(dir, sock string) string {
	return Containerd16Config(dir, sock, true) + fmt.Sprintf(`[plugins."io.containerd.grpc.v1.cri"]
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, filepath.Join(dir, "cni", "bin"), filepath.Join(dir, "cni", "conf"))
}

// Not16 says why bin cannot be used as Debian's containerd 1.6, or "" when
// it can.
func Not16(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return fmt.Sprintf("%s cannot run: %v", bin, err)
	}
	if !strings.Contains(string(out), " 1.6.") {
		return fmt.Sprintf("%s is not containerd 1.6 (%s)", bin, strings.TrimSpace(string(out)))
	}
	return ""
}
