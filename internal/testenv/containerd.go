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

// Lines are the containerd builds the e2e core runs on besides the embedded
// one and Debian's 1.6, by the name scripts/containerd-lines.sh links them
// under (containerd-<name>), with the version each reports.
var Lines = []Line{
	{Name: "1.7", Version: "1.7.35", ConfigVersion: 2},
	{Name: "2.2", Version: "2.2.9", ConfigVersion: 3},
	{Name: "2.3", Version: "2.3.7", ConfigVersion: 3},
	{Name: "k3s-2.3", Version: "2.3.2-k3s2", ConfigVersion: 3},
}

// LineNamed is the line of Lines called name.
func LineNamed(name string) (Line, bool) {
	for _, l := range Lines {
		if l.Name == name {
			return l, true
		}
	}
	return Line{}, false
}

// Line is a containerd build of the matrix.
type Line struct {
	Name, Version string
	// ConfigVersion is the config schema the line reads: 2 (1.x), 3 (2.0
	// to 2.3; the embedded 2.4 writes 4).
	ConfigVersion int
}

// Binary finds the line's containerd on PATH and says why it cannot be
// used ("" when it can): missing, or reporting another version.
func (l Line) Binary() (bin, why string) {
	bin, err := exec.LookPath("containerd-" + l.Name)
	if err != nil {
		return "", fmt.Sprintf("containerd-%s is not on PATH (make deps builds it: scripts/containerd-lines.sh)", l.Name)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "", fmt.Sprintf("%s cannot run: %v", bin, err)
	}
	if !strings.Contains(string(out), " "+l.Version+" ") {
		return "", fmt.Sprintf("%s is not containerd %s (%s)", bin, l.Version, strings.TrimSpace(string(out)))
	}
	return bin, ""
}

// CRIConfig is the line's config with its CRI plugin on, kept under dir and
// serving sock (and sock.ttrpc), as the tests run it: overlayfs, CNI dirs
// under dir (empty: no pod networks), hosts.toml files under dir/certs.d, no
// NRI, no TCP or metrics listener.
func (l Line) CRIConfig(dir, sock string) string {
	if l.ConfigVersion == 2 {
		return Containerd16CRIConfig(dir, sock) + fmt.Sprintf(`  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %q
[plugins."io.containerd.nri.v1.nri"]
  disable = true
`, filepath.Join(dir, "certs.d"))
	}
	return fmt.Sprintf(`version = 3
root = %q
state = %q
temp = %q
imports = []
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins.'io.containerd.internal.v1.opt']
  path = %q
[plugins.'io.containerd.nri.v1.nri']
  disable = true
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = %q
[plugins.'io.containerd.cri.v1.runtime']
  cdi_spec_dirs = []
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%q]
    conf_dir = %q
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), filepath.Join(dir, "tmp"), sock, sock+".ttrpc",
		filepath.Join(dir, "opt"), filepath.Join(dir, "certs.d"), filepath.Join(dir, "cni", "bin"), filepath.Join(dir, "cni", "conf"))
}
