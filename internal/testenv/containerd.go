package testenv

import (
	"fmt"
	"path/filepath"
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
