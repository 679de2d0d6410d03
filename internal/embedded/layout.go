package embedded

import (
	"fmt"
	"path/filepath"

	"github.com/holdfast-project/holdfast/internal/datadir"
)

// maxSocketPath is the longest unix socket path containerd accepts: the
// kernel's sun_path holds 108 bytes with the terminating NUL, and containerd
// (pkg/sys.CreateUnixSocket) refuses paths longer than 104 bytes, the BSD limit.
const maxSocketPath = 104

// Layout is where an embedded containerd keeps everything, all of it under
// one data dir. [Paths] computes it; [WriteConfig] creates the directories.
type Layout struct {
	// DataDir is the absolute data dir the layout was computed for.
	DataDir string
	// Dir is <data>/containerd, the parent of everything containerd-owned.
	Dir string
	// Config is the generated config file, <data>/containerd/config.toml.
	Config string
	// Root is containerd's persistent root (content, metadata, snapshots).
	Root string
	// State is containerd's transient state directory.
	State string
	// Temp is containerd's TMPDIR; the overlay probe also runs in it.
	Temp string
	// Address is the gRPC unix socket clients connect to.
	Address string
	// TTRPCAddress is the ttrpc unix socket (used by shims).
	TTRPCAddress string
	// DebugAddress is the pprof/debug socket, served only with Options.Debug.
	DebugAddress string
	// Opt is the path of containerd's opt plugin (bin/ and lib/ under it).
	Opt string
	// CNIBinDir and CNIConfDir are the CRI plugin's CNI directories. Nothing
	// is installed there: the CRI image service works without CNI.
	CNIBinDir  string
	CNIConfDir string
	// RegistryConfigPath is the registry config_path of the CRI image
	// service and the transfer service: <data>/registry.d/<host>/hosts.toml.
	RegistryConfigPath string
	// Log is the file containerd's stdout and stderr are appended to.
	Log string
	// Snapshotter is the snapshotter the config selects. Paths leaves it
	// empty; WriteConfig fills it in (after auto-detection).
	Snapshotter string
}

// Paths returns the layout under dataDir. A relative dataDir is made absolute
// against the working directory. Paths does not check the socket path
// lengths; WriteConfig and Start do (see [Layout.Check]).
func Paths(dataDir string) Layout {
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	} else {
		dataDir = filepath.Clean(dataDir)
	}
	dir := datadir.At(dataDir).Containerd()
	return Layout{
		DataDir:            dataDir,
		Dir:                dir,
		Config:             filepath.Join(dir, "config.toml"),
		Root:               filepath.Join(dir, "root"),
		State:              filepath.Join(dir, "state"),
		Temp:               filepath.Join(dir, "tmp"),
		Address:            filepath.Join(dir, "containerd.sock"),
		TTRPCAddress:       filepath.Join(dir, "containerd.sock.ttrpc"),
		DebugAddress:       filepath.Join(dir, "debug.sock"),
		Opt:                filepath.Join(dir, "opt"),
		CNIBinDir:          filepath.Join(dir, "cni", "bin"),
		CNIConfDir:         filepath.Join(dir, "cni", "net.d"),
		RegistryConfigPath: datadir.At(dataDir).RegistryConfig(),
		Log:                filepath.Join(dir, "containerd.log"),
	}
}

// Check reports whether every socket of the layout fits the unix socket path
// limit. The error names the socket, its length and the limit.
func (l Layout) Check() error {
	for _, s := range []struct{ name, path string }{
		{"gRPC", l.Address},
		{"ttrpc", l.TTRPCAddress},
		{"debug", l.DebugAddress},
	} {
		if n := len(s.path); n > maxSocketPath {
			return fmt.Errorf("data dir %s is too long: containerd's %s socket %s would be %d bytes, "+
				"over containerd's %d-byte limit for unix socket paths; use a data dir of at most %d bytes",
				l.DataDir, s.name, s.path, n, maxSocketPath, len(l.DataDir)-(n-maxSocketPath))
		}
	}
	return nil
}
