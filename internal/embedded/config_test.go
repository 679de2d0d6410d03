package embedded

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
	"golang.org/x/sys/unix"

	"github.com/holdfast-project/holdfast/internal/testenv"
)

func TestPathsAreUnderDataDir(t *testing.T) {
	t.Parallel()
	data := "/var/lib/holdfast"
	l := Paths(data)
	v := reflect.ValueOf(l)
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		p := v.Field(i).String()
		switch name {
		case "Snapshotter":
			if p != "" {
				t.Errorf("Paths set Snapshotter = %q, want empty", p)
			}
			continue
		case "DataDir":
			if p != data {
				t.Errorf("DataDir = %q, want %q", p, data)
			}
			continue
		}
		if !strings.HasPrefix(p, data+"/") {
			t.Errorf("%s = %q, not under %s", name, p, data)
		}
	}
	want := map[string]string{
		l.Config:             "/var/lib/holdfast/containerd/config.toml",
		l.Root:               "/var/lib/holdfast/containerd/root",
		l.State:              "/var/lib/holdfast/containerd/state",
		l.Address:            "/var/lib/holdfast/containerd/containerd.sock",
		l.TTRPCAddress:       "/var/lib/holdfast/containerd/containerd.sock.ttrpc",
		l.RegistryConfigPath: "/var/lib/holdfast/registry.d",
		l.Log:                "/var/lib/holdfast/containerd/containerd.log",
	}
	for got, w := range want {
		if got != w {
			t.Errorf("got %q, want %q", got, w)
		}
	}
}

func TestPathsRelativeDataDir(t *testing.T) {
	t.Parallel()
	l := Paths("rel/data")
	if !filepath.IsAbs(l.DataDir) || !strings.HasSuffix(l.DataDir, "/rel/data") {
		t.Errorf("DataDir = %q, want an absolute path ending in /rel/data", l.DataDir)
	}
}

func readConfig(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := toml.Unmarshal(b, &m); err != nil {
		t.Fatalf("config is not valid TOML: %v\n%s", err, b)
	}
	return m
}

// lookup walks nested tables by key.
func lookup(t *testing.T, m map[string]any, keys ...string) any {
	t.Helper()
	var cur any = m
	for _, k := range keys {
		tbl, ok := cur.(map[string]any)
		if !ok {
			t.Fatalf("%v: %v is not a table", keys, cur)
		}
		if cur, ok = tbl[k]; !ok {
			t.Fatalf("config has no %s", strings.Join(keys, " → "))
		}
	}
	return cur
}

// absPaths collects every string value of the config that is an absolute path.
func absPaths(v any, out *[]string) {
	switch v := v.(type) {
	case string:
		if strings.HasPrefix(v, "/") {
			*out = append(*out, v)
		}
	case map[string]any:
		for _, e := range v {
			absPaths(e, out)
		}
	case []any:
		for _, e := range v {
			absPaths(e, out)
		}
	}
}

func TestWriteConfig(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	l, err := WriteConfig(data, Options{Snapshotter: SnapshotterNative, LogLevel: "warn"})
	if err != nil {
		t.Fatal(err)
	}
	if l.Snapshotter != SnapshotterNative {
		t.Errorf("Snapshotter = %q, want native", l.Snapshotter)
	}
	fi, err := os.Stat(l.Config)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("config mode %v, want 0600", fi.Mode().Perm())
	}
	for _, d := range []string{l.Root, l.State, l.Temp, l.Opt, l.CNIBinDir, l.CNIConfDir, l.RegistryConfigPath} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Errorf("directory %s not created: %v", d, err)
		}
	}

	m := readConfig(t, l.Config)
	var paths []string
	absPaths(m, &paths)
	if len(paths) < 10 {
		t.Errorf("only %d paths in the config: %v", len(paths), paths)
	}
	for _, p := range paths {
		if !strings.HasPrefix(p, data+"/") {
			t.Errorf("config path %q is outside the data dir %s", p, data)
		}
	}

	const plugins = "plugins"
	for _, c := range []struct {
		keys []string
		want any
	}{
		{[]string{"version"}, int64(4)},
		{[]string{"root"}, l.Root},
		{[]string{"state"}, l.State},
		{[]string{"temp"}, l.Temp},
		{[]string{"imports"}, []any{}},
		{[]string{"debug", "level"}, "warn"},
		{[]string{plugins, "io.containerd.server.v1.grpc", "address"}, l.Address},
		{[]string{plugins, "io.containerd.server.v1.ttrpc", "address"}, l.TTRPCAddress},
		{[]string{plugins, "io.containerd.server.v1.metrics", "address"}, ""},
		{[]string{plugins, "io.containerd.server.v1.grpc-tcp", "address"}, ""},
		{[]string{plugins, "io.containerd.server.v1.debug", "address"}, ""},
		{[]string{plugins, "io.containerd.internal.v1.opt", "path"}, l.Opt},
		{[]string{plugins, "io.containerd.nri.v1.nri", "disable"}, true},
		{[]string{plugins, "io.containerd.cri.v1.images", "snapshotter"}, "native"},
		{[]string{plugins, "io.containerd.cri.v1.images", "registry", "config_path"}, l.RegistryConfigPath},
		{[]string{plugins, "io.containerd.cri.v1.images", "pinned_images", "sandbox"}, ""},
		{[]string{plugins, "io.containerd.cri.v1.runtime", "cni", "bin_dirs"}, []any{l.CNIBinDir}},
		{[]string{plugins, "io.containerd.cri.v1.runtime", "cni", "conf_dir"}, l.CNIConfDir},
		{[]string{plugins, "io.containerd.transfer.v1.local", "config_path"}, l.RegistryConfigPath},
		{[]string{plugins, "io.containerd.grpc.v1.cri", "stream_server_address"}, "127.0.0.1"},
	} {
		if got := lookup(t, m, c.keys...); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s = %#v, want %#v", strings.Join(c.keys, " → "), got, c.want)
		}
	}
	unpack := lookup(t, m, plugins, "io.containerd.transfer.v1.local", "unpack_config").([]any)
	if len(unpack) != 1 || unpack[0].(map[string]any)["snapshotter"] != "native" {
		t.Errorf("unpack_config = %v, want one entry with snapshotter native", unpack)
	}
	req := lookup(t, m, "required_plugins").([]any)
	if !slices.Contains(req, any("io.containerd.snapshotter.v1.native")) {
		t.Errorf("required_plugins = %v, want the native snapshotter in it", req)
	}
	if _, ok := m["grpc"]; ok {
		t.Error("config has a top-level [grpc] table, which version 4 ignores")
	}
}

func TestWriteConfigDebug(t *testing.T) {
	t.Parallel()
	l, err := WriteConfig(t.TempDir(), Options{Snapshotter: SnapshotterNative, Debug: true})
	if err != nil {
		t.Fatal(err)
	}
	m := readConfig(t, l.Config)
	if got := lookup(t, m, "debug", "level"); got != "debug" {
		t.Errorf("debug level = %v, want debug", got)
	}
	if got := lookup(t, m, "plugins", "io.containerd.server.v1.debug", "address"); got != l.DebugAddress {
		t.Errorf("debug address = %v, want %s", got, l.DebugAddress)
	}
}

func TestWriteConfigRewrites(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	if _, err := WriteConfig(data, Options{Snapshotter: SnapshotterNative}); err != nil {
		t.Fatal(err)
	}
	l, err := WriteConfig(data, Options{Snapshotter: SnapshotterOverlayFS})
	if err != nil {
		t.Fatal(err)
	}
	if got := lookup(t, readConfig(t, l.Config), "plugins", "io.containerd.cri.v1.images", "snapshotter"); got != "overlayfs" {
		t.Errorf("snapshotter after rewrite = %v, want overlayfs", got)
	}
	entries, err := os.ReadDir(l.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

func TestWriteConfigSocketPathTooLong(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	// "/containerd/containerd.sock.ttrpc" adds 33 bytes to the data dir, and
	// Join one "/" to base: the ttrpc socket path is 105 bytes.
	data := filepath.Join(base, strings.Repeat("d", maxSocketPath-len(base)-1-33+1))
	_, err := WriteConfig(data, Options{Snapshotter: SnapshotterNative})
	if err == nil {
		t.Fatal("WriteConfig accepted a socket path over the limit")
	}
	for _, want := range []string{"too long", "104", "ttrpc", data} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("WriteConfig created %s before failing: %v", data, err)
	}

	// One byte shorter fits.
	data = data[:len(data)-1]
	if _, err := WriteConfig(data, Options{Snapshotter: SnapshotterNative}); err != nil {
		t.Errorf("WriteConfig rejected a data dir that fits: %v", err)
	}
}

func TestWriteConfigRejectsBadOptions(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{
		{Snapshotter: SnapshotterNative, LogLevel: "loud"},
		{Snapshotter: "../overlayfs"},
	} {
		if _, err := WriteConfig(t.TempDir(), o); err == nil {
			t.Errorf("WriteConfig(%+v) succeeded, want an error", o)
		}
	}
}

func TestDetectSnapshotterNonRoot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if got := detectSnapshotter(dir, 1000); got != SnapshotterNative {
		t.Errorf("detectSnapshotter as non-root = %q, want native", got)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("non-root detection left %d entries in %s", len(entries), dir)
	}
}

func requireRoot(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t, "mounts overlays and runs containerd")
}

// overlayWorks is an independent check (a plain mount(2) of a one-layer
// overlay) that the kernel and t.TempDir's filesystem support overlayfs.
func overlayWorks(t *testing.T) bool {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"l", "u", "w", "m"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	opts := "lowerdir=" + dir + "/l,upperdir=" + dir + "/u,workdir=" + dir + "/w"
	if err := unix.Mount("overlay", dir+"/m", "overlay", 0, opts); err != nil {
		return false
	}
	if err := unix.Unmount(dir+"/m", 0); err != nil {
		t.Fatal(err)
	}
	return true
}

func TestDetectSnapshotterRoot(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	want := SnapshotterNative
	if overlayWorks(t) {
		want = SnapshotterOverlayFS
	}
	dir := t.TempDir()
	if got := detectSnapshotter(dir, 0); got != want {
		t.Errorf("detectSnapshotter(%s) = %q, want %q", dir, got, want)
	}
	assertClean(t, dir)
}

// TestDetectSnapshotterOnOverlay runs the detection on a data dir that is
// itself an overlay mount: overlayfs can't be an upper layer, so native.
func TestDetectSnapshotterOnOverlay(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	if !overlayWorks(t) {
		testenv.Missing(t, "overlayfs", "overlayfs does not work here")
	}
	merged := overlayMount(t)

	if got := detectSnapshotter(merged, 0); got != SnapshotterNative {
		t.Errorf("detectSnapshotter on an overlay = %q, want native", got)
	}
	if entries, _ := os.ReadDir(merged); len(entries) != 0 {
		t.Errorf("probe left %d entries in %s", len(entries), merged)
	}
	points, err := mountPointsUnder(merged)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(points, []string{merged}) {
		t.Errorf("mounts under %s after probe: %v", merged, points)
	}
}

// assertClean fails when dir has entries or mounts left.
func assertClean(t *testing.T, dir string) {
	t.Helper()
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("%d entries left in %s", len(entries), dir)
	}
	points, err := mountPointsUnder(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(points) != 0 {
		t.Errorf("mounts left under %s: %v", dir, points)
	}
}

func TestParseMountPoints(t *testing.T) {
	t.Parallel()
	table := `21 26 0:20 / /proc rw,relatime - proc proc rw
36 26 0:31 / /data/with\040space/root rw - tmpfs tmpfs rw
37 36 0:32 / /data/with\040space/root/a\134b rw - tmpfs tmpfs rw
`
	got, err := parseMountPoints([]byte(table))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/proc", "/data/with space/root", `/data/with space/root/a\b`}
	if !slices.Equal(got, want) {
		t.Errorf("parseMountPoints = %q, want %q", got, want)
	}
}

func TestChildEnv(t *testing.T) {
	t.Parallel()
	got := childEnv([]string{"PATH=/bin", "NOTIFY_SOCKET=/run/systemd/notify", "LISTEN_FDS=1", "HOME=/root"})
	if want := []string{"PATH=/bin", "HOME=/root"}; !slices.Equal(got, want) {
		t.Errorf("childEnv = %q, want %q", got, want)
	}
}

// overlayMount mounts a fresh overlay in a temp dir for the test and returns
// its merged dir.
func overlayMount(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"l", "u", "w", "m"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	merged := filepath.Join(dir, "m")
	if err := unix.Mount("overlay", merged, "overlay", 0,
		"lowerdir="+dir+"/l,upperdir="+dir+"/u,workdir="+dir+"/w"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(merged, unix.MNT_DETACH) })
	return merged
}

func TestBinaryFromPath(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PATH", dir)
	if _, err := Binary(); err == nil || !strings.Contains(err.Error(), BinaryName) || !strings.Contains(err.Error(), "--address") {
		t.Fatalf("no %s anywhere: got %v, want an error naming it and --address", BinaryName, err)
	}
	bin := filepath.Join(dir, BinaryName)
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := Binary()
	if err != nil || got != bin {
		t.Fatalf("Binary() = %q, %v; want %q", got, err, bin)
	}
}
