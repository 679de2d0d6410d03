package registries

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestSettingsNone: with neither registries.yaml nor a peer mirror, the
// registry config is left alone, not even made.
func TestSettingsNone(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "certs.d")
	h, err := Settings{PeerRegistries: DefaultPeerRegistries, Dir: dir}.Hosts()
	if err != nil || h.Off != "" || h.Warnings != nil || h.Credentials != nil {
		t.Fatalf("Hosts: %+v, %v", h, err)
	}
	if skipped, err := h.Write(); err != nil || skipped != nil {
		t.Errorf("Write: %q, %v", skipped, err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the registry config was made: %v", err)
	}
}

// TestSettingsRefused: a bad peer mirror or peer registry is a SettingError
// naming the setting and the value, never registries.yaml, which was not
// given; nothing is written.
func TestSettingsRefused(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "certs.d")
	for _, tc := range []struct {
		mirror string
		regs   []string
		want   []string
	}{
		{"ftp://10.0.0.5", []string{"docker.io"}, []string{"--peer-mirror"}},
		{"http://10.0.0.5:30020", []string{"docker.io", "host:99999"}, []string{"--peer-registries", `"host:99999"`}},
		{"http://10.0.0.5:30020", []string{"docker.io", "../etc"}, []string{"--peer-registries", `"../etc"`}},
	} {
		_, err := Settings{PeerMirror: tc.mirror, PeerRegistries: tc.regs, Dir: dir}.Hosts()
		var bad *SettingError
		if !errors.As(err, &bad) || strings.Contains(err.Error(), "registries.yaml") {
			t.Errorf("%s %q: %v; want a SettingError", tc.mirror, tc.regs, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s %q: %v; want it to name %s", tc.mirror, tc.regs, err, w)
			}
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a refused setting made the registry config: %v", err)
	}
}

// TestSettingsYAML: registries.yaml's mirrors come after the peer mirror,
// its credentials are the pulls', and the files name both as their source.
func TestSettingsYAML(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	yaml := filepath.Join(tmp, "registries.yaml")
	if err := os.WriteFile(yaml, []byte(sample), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "certs.d")
	h, err := Settings{YAML: yaml, PeerMirror: "http://10.0.0.5:30020", PeerRegistries: []string{"docker.io"}, Dir: dir}.Hosts()
	if err != nil {
		t.Fatal(err)
	}
	if h.PeerMirror != "http://10.0.0.5:30020" {
		t.Errorf("peer mirror %q, want it as its peers reach it", h.PeerMirror)
	}
	if want := map[string]Credential{"mirror.example.com:5000": {"alice", "s3cret"}, "registry.local": {"bob", "hunter2"}}; !reflect.DeepEqual(h.Credentials, want) {
		t.Errorf("credentials %v, want %v", h.Credentials, want)
	}
	if len(h.Warnings) != 1 || !strings.Contains(h.Warnings[0], "registry.example.com has rewrites") {
		t.Errorf("warnings %q", h.Warnings)
	}
	if skipped, err := h.Write(); err != nil || skipped != nil {
		t.Fatalf("Write: %q, %v", skipped, err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "docker.io", "hosts.toml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	if !strings.HasPrefix(text, Marker+yaml+" and --peer-mirror http://10.0.0.5:30020;") ||
		strings.Index(text, "http://10.0.0.5:30020\"]") > strings.Index(text, "mirror.example.com:5000\"]") {
		t.Errorf("docker.io's hosts.toml:\n%s", text)
	}
}

// TestSettingsYAMLMissing: a registries.yaml that does not exist is no
// file, as K3s reads it, and Off says so; the peer mirror still applies.
func TestSettingsYAMLMissing(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	yaml := filepath.Join(tmp, "registries.yaml")
	h, err := Settings{YAML: yaml, PeerMirror: "http://10.0.0.5:30020", PeerRegistries: []string{"ghcr.io"}, Dir: filepath.Join(tmp, "certs.d")}.Hosts()
	if err != nil {
		t.Fatal(err)
	}
	if want := "registries.yaml " + yaml + " does not exist: pulls use no mirrors, TLS settings or credentials from it"; h.Off != want {
		t.Errorf("Off %q, want %q", h.Off, want)
	}
	if _, err := h.Write(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(tmp, "certs.d", "ghcr.io", "hosts.toml")); err != nil {
		t.Errorf("the peer mirror's hosts.toml: %v", err)
	}
}

// TestSettingsPerms: a registries.yaml that others may change is refused,
// naming it, what is wrong and the way out, and a registry config others
// may write refuses the write; InsecurePerms takes both.
func TestSettingsPerms(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	yaml := filepath.Join(tmp, "registries.yaml")
	if err := os.WriteFile(yaml, []byte("mirrors:\n  docker.io:\n    endpoint: [\"http://10.0.0.9:5000\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(yaml, 0o666); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "certs.d")
	_, err := Settings{YAML: yaml, Dir: dir}.Hosts()
	var bad *SettingError
	want := "registries.yaml " + yaml + " is writable by others (mode 0666); fix the mode or owner, or pass --insecure-perms"
	if !errors.As(err, &bad) || !strings.Contains(err.Error(), want) {
		t.Errorf("a registries.yaml others may write: %v; want a SettingError saying %q", err, want)
	}
	if err := os.Chmod(yaml, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	h, err := Settings{YAML: yaml, Dir: dir}.Hosts()
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.Write()
	var refused *RefusedError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "applying "+yaml+" to "+dir+": ") {
		t.Errorf("a registry config others may write: %v; want a RefusedError", err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*", "hosts.toml")); len(m) != 0 {
		t.Errorf("a refused write wrote %q", m)
	}
	h, err = Settings{YAML: yaml, Dir: dir, InsecurePerms: true}.Hosts()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Write(); err != nil {
		t.Errorf("Write with InsecurePerms: %v", err)
	}
}

// TestSettingsKeepOperatorsFile: a hosts.toml holdfast did not write is
// kept, and Write says why the registry goes without what the settings
// have for it.
func TestSettingsKeepOperatorsFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	own := filepath.Join(dir, "docker.io", "hosts.toml")
	if err := os.MkdirAll(filepath.Dir(own), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(own, []byte("server = \"https://docker.io\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := Settings{PeerMirror: "http://10.0.0.5:30020", PeerRegistries: []string{"docker.io", "ghcr.io"}, Dir: dir}.Hosts()
	if err != nil {
		t.Fatal(err)
	}
	skipped, err := h.Write()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"registry docker.io: " + own + " was not written by holdfast and is kept as it is: pulls from docker.io follow it, without what --peer-mirror http://10.0.0.5:30020 has for it"}
	if !reflect.DeepEqual(skipped, want) {
		t.Errorf("skipped %q, want %q", skipped, want)
	}
	if data, _ := os.ReadFile(own); string(data) != "server = \"https://docker.io\"\n" {
		t.Errorf("the operator's file is now %q", data)
	}
}
