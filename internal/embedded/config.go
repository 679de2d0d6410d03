package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/platforms"
	"github.com/pelletier/go-toml/v2"
	"golang.org/x/sys/unix"

	"github.com/holdfast-project/holdfast/internal/files"
)

// Snapshotter names accepted in Options.Snapshotter.
const (
	SnapshotterOverlayFS = "overlayfs"
	SnapshotterNative    = "native"
)

// configVersion is the config schema written: containerd v2.4.2's
// version.ConfigVersion. In version 4 the server settings live in the
// io.containerd.server.v1.* plugins; a top-level [grpc] table is ignored.
const configVersion = 4

// Options tune the embedded containerd.
type Options struct {
	// Snapshotter is the snapshotter for the CRI image service and the
	// transfer service's unpacking: "" picks overlayfs when an overlay can
	// really be mounted on the data dir's filesystem (root only), else native.
	Snapshotter string
	// LogLevel is containerd's log level (trace, debug, info, warn, error,
	// fatal, panic); "" keeps containerd's default (info), or debug with Debug.
	LogLevel string
	// Debug turns on debug logging (unless LogLevel says otherwise) and the
	// pprof debug socket at Layout.DebugAddress.
	Debug bool
	// Binary is the executable Start runs as `<Binary> containerd --config F`;
	// "" means [Binary](): holdfast-containerd. Tests set it to a binary
	// whose main calls daemon.Main.
	Binary string
}

var logLevels = []string{"trace", "debug", "info", "warn", "warning", "error", "fatal", "panic"}

// WriteConfig creates the layout's directories under dataDir and writes the
// containerd config file (atomically: temp file and rename). It returns the
// layout with Snapshotter set to the one chosen.
//
// The config keeps containerd inside the data dir: sockets, root, state, temp,
// opt, CNI dirs, registry config_path and image-verifier dir are all under it;
// no config imports (/etc/containerd/conf.d); NRI disabled (it would share
// /var/run/nri with the node's containerd); no metrics, debug (unless
// Options.Debug) or TCP gRPC listeners. The CRI plugin is left on because its
// image service (labels, sha256 records, pins) is what the kubelet sees on a
// real node; it needs neither runc nor CNI to run. Its streaming server still
// listens on an ephemeral 127.0.0.1 port (containerd always starts it).
func WriteConfig(dataDir string, opts Options) (Layout, error) {
	l := Paths(dataDir)
	if err := l.Check(); err != nil {
		return Layout{}, fmt.Errorf("writing containerd config: %w", err)
	}
	if opts.LogLevel != "" && !slices.Contains(logLevels, opts.LogLevel) {
		return Layout{}, fmt.Errorf("writing containerd config: unknown log level %q (want one of %s)",
			opts.LogLevel, strings.Join(logLevels, ", "))
	}
	if strings.ContainsAny(opts.Snapshotter, "/. \t") {
		return Layout{}, fmt.Errorf("writing containerd config: invalid snapshotter name %q", opts.Snapshotter)
	}
	for _, d := range []struct {
		path string
		perm os.FileMode
	}{
		{l.DataDir, 0o711},
		{l.Dir, 0o711},
		{l.Root, 0o711},
		{l.State, 0o711},
		{l.Temp, 0o700},
		{l.Opt, 0o755},
		{l.CNIBinDir, 0o755},
		{l.CNIConfDir, 0o755},
		{l.RegistryConfigPath, 0o755},
	} {
		if err := os.MkdirAll(d.path, d.perm); err != nil {
			return Layout{}, fmt.Errorf("writing containerd config: %w", err)
		}
	}
	l.Snapshotter = opts.Snapshotter
	if l.Snapshotter == "" {
		l.Snapshotter = detectSnapshotter(l.Temp, os.Geteuid())
	}
	b, err := renderConfig(l, opts)
	if err != nil {
		return Layout{}, fmt.Errorf("writing containerd config: %w", err)
	}
	if err := files.WriteFile(l.Config, b, 0o600); err != nil {
		return Layout{}, fmt.Errorf("writing containerd config: %w", err)
	}
	return l, nil
}

// fileConfig is the top level of containerd's config file (version 4).
type fileConfig struct {
	Version         int               `toml:"version"`
	Root            string            `toml:"root"`
	State           string            `toml:"state"`
	Temp            string            `toml:"temp"`
	Imports         []string          `toml:"imports"`
	DisabledPlugins []string          `toml:"disabled_plugins"`
	RequiredPlugins []string          `toml:"required_plugins"`
	Debug           *debugConfig      `toml:"debug,omitempty"`
	Timeouts        map[string]string `toml:"timeouts"`
	Plugins         map[string]any    `toml:"plugins"`
}

type debugConfig struct {
	Level string `toml:"level"`
}

// table is one TOML table of plugin settings.
type table = map[string]any

func renderConfig(l Layout, opts Options) ([]byte, error) {
	level := opts.LogLevel
	if level == "" && opts.Debug {
		level = "debug"
	}
	debugAddress := ""
	if opts.Debug {
		debugAddress = l.DebugAddress
	}
	cfg := fileConfig{
		Version: configVersion,
		Root:    l.Root,
		State:   l.State,
		Temp:    l.Temp,
		// Without imports the node's /etc/containerd/conf.d never applies.
		Imports:         []string{},
		DisabledPlugins: []string{},
		// Fail at start, with the cause in the log, rather than run without
		// the snapshotter or the image services holdfast relies on.
		RequiredPlugins: []string{
			"io.containerd.snapshotter.v1." + l.Snapshotter,
			"io.containerd.transfer.v1.local",
			"io.containerd.cri.v1.images",
		},
		Timeouts: map[string]string{
			// Fail instead of waiting forever when another containerd
			// holds the metadata database of this data dir.
			"io.containerd.timeout.bolt.open": "10s",
		},
		Plugins: map[string]any{
			"io.containerd.server.v1.grpc":     table{"address": l.Address},
			"io.containerd.server.v1.ttrpc":    table{"address": l.TTRPCAddress},
			"io.containerd.server.v1.grpc-tcp": table{"address": ""},
			"io.containerd.server.v1.metrics":  table{"address": ""},
			"io.containerd.server.v1.debug":    table{"address": debugAddress},
			"io.containerd.internal.v1.opt":    table{"path": l.Opt},
			"io.containerd.nri.v1.nri":         table{"disable": true},
			"io.containerd.image-verifier.v1.bindir": table{
				"bin_dir": filepath.Join(l.Opt, "image-verifier", "bin"),
			},
			"io.containerd.transfer.v1.local": table{
				"config_path": l.RegistryConfigPath,
				// Unpack with the chosen snapshotter: the default names
				// overlayfs, and the transfer service (and the CRI image
				// service that needs it) fails where overlayfs can't load.
				"unpack_config": []table{{
					"platform":    platforms.DefaultString(),
					"snapshotter": l.Snapshotter,
					"differ":      "walking",
				}},
			},
			"io.containerd.cri.v1.images": table{
				"snapshotter": l.Snapshotter,
				"registry":    table{"config_path": l.RegistryConfigPath},
				// No sandbox (pause) image: no pods run here, and a name
				// listed here gets the CRI's pinned label on every event.
				"pinned_images": table{"sandbox": ""},
			},
			"io.containerd.cri.v1.runtime": table{
				"cdi_spec_dirs": []string{},
				"cni": table{
					"bin_dirs": []string{l.CNIBinDir},
					"conf_dir": l.CNIConfDir,
				},
			},
			"io.containerd.grpc.v1.cri": table{
				"disable_tcp_service":   true,
				"stream_server_address": "127.0.0.1",
				"stream_server_port":    "0",
			},
		},
	}
	if level != "" {
		cfg.Debug = &debugConfig{Level: level}
	}
	b, err := toml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	header := "# Generated by holdfast for its embedded containerd; rewritten on every start.\n"
	return append([]byte(header), b...), nil
}

// detectSnapshotter returns overlayfs when an overlay mount really works in a
// temporary directory under dir, else native. Only root can mount, so any
// other euid gets native without trying.
func detectSnapshotter(dir string, euid int) string {
	if euid != 0 {
		return SnapshotterNative
	}
	if err := probeOverlay(dir); err != nil {
		return SnapshotterNative
	}
	return SnapshotterOverlayFS
}

// probeOverlay mounts a two-layer overlay in a temporary directory under dir
// and unmounts it. It fails where the kernel lacks overlayfs, where the
// filesystem can't be an upper layer (overlay on overlay, some network file
// systems), or where the path has characters overlay options can't carry.
func probeOverlay(dir string) (err error) {
	tmp, err := os.MkdirTemp(dir, "overlay-probe-")
	if err != nil {
		return err
	}
	merged := filepath.Join(tmp, "merged")
	mounted := false
	defer func() {
		if mounted {
			if uerr := unmount(merged); uerr != nil {
				err = errors.Join(err, uerr)
				return // never RemoveAll through a live mount
			}
		}
		err = errors.Join(err, os.RemoveAll(tmp))
	}()
	if strings.ContainsAny(tmp, ",:") {
		return fmt.Errorf("overlay options can't carry path %s", tmp)
	}
	var paths []string
	for _, name := range []string{"lower1", "lower2", "upper", "work", "merged"} {
		p := filepath.Join(tmp, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			return err
		}
		paths = append(paths, p)
	}
	if err := os.WriteFile(filepath.Join(paths[0], "f"), []byte("x"), 0o600); err != nil {
		return err
	}
	data := fmt.Sprintf("lowerdir=%s:%s,upperdir=%s,workdir=%s", paths[1], paths[0], paths[2], paths[3])
	if err := unix.Mount("overlay", merged, "overlay", 0, data); err != nil {
		return fmt.Errorf("mounting overlay: %w", err)
	}
	mounted = true
	if _, err := os.Stat(filepath.Join(merged, "f")); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(merged, "g"), []byte("y"), 0o600)
}
