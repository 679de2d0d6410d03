package registries

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

const sample = `
mirrors:
  docker.io:
    endpoint:
      - "https://mirror.example.com:5000"
      - "registry.local"
  registry.example.com:
    endpoint:
      - "http://10.0.0.1:5000"
    rewrite:
      "^team/(.*)": "mirror/team/$1"
  "*":
    endpoint:
      - "https://catchall.example.com"
configs:
  "mirror.example.com:5000":
    auth:
      username: alice
      password: s3cret
    tls:
      ca_file: /etc/ssl/mirror-ca.pem
      cert_file: /etc/ssl/client.pem
      key_file: /etc/ssl/client-key.pem
  "https://registry.local":
    auth:
      auth: Ym9iOmh1bnRlcjI=
    tls:
      insecure_skip_verify: true
`

func load(t *testing.T) File {
	t.Helper()
	p := filepath.Join(t.TempDir(), "registries.yaml")
	if err := os.WriteFile(p, []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

type hostsFile struct {
	Server string `toml:"server"`
	Host   map[string]struct {
		Capabilities []string   `toml:"capabilities"`
		CA           string     `toml:"ca"`
		Client       [][]string `toml:"client"`
		SkipVerify   bool       `toml:"skip_verify"`
	} `toml:"host"`
}

func TestHostsFiles(t *testing.T) {
	t.Parallel()
	files, warnings, err := load(t).HostsFiles("registries.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// docker.io, registry.example.com and "*" have mirrors; mirror.example.com:5000
	// has a config of its own (for pulls straight from it).
	if len(files) != 4 {
		t.Fatalf("files for %d registries, want 4: %v", len(files), files)
	}
	var direct hostsFile
	if err := toml.Unmarshal([]byte(files["mirror.example.com:5000"]), &direct); err != nil || direct.Server != "https://mirror.example.com:5000" {
		t.Errorf("mirror.example.com:5000 hosts.toml: %v %+v", err, direct)
	}
	var hub hostsFile
	if err := toml.Unmarshal([]byte(files["docker.io"]), &hub); err != nil {
		t.Fatalf("docker.io hosts.toml does not parse: %v\n%s", err, files["docker.io"])
	}
	if hub.Server != "https://registry-1.docker.io" {
		t.Errorf("server = %q", hub.Server)
	}
	m := hub.Host["https://mirror.example.com:5000"]
	if m.CA != "/etc/ssl/mirror-ca.pem" || len(m.Client) != 1 || m.Client[0][0] != "/etc/ssl/client.pem" || len(m.Capabilities) != 2 {
		t.Errorf("mirror host = %+v", m)
	}
	if !hub.Host["https://registry.local"].SkipVerify {
		t.Errorf("registry.local does not skip verify: %+v", hub.Host)
	}
	// Endpoint order is kept: hosts.toml tries hosts in file order.
	if i, j := strings.Index(files["docker.io"], "mirror.example.com"), strings.Index(files["docker.io"], "registry.local"); i < 0 || j < i {
		t.Errorf("endpoints out of order:\n%s", files["docker.io"])
	}
	if !strings.HasPrefix(files["_default"], Marker) || strings.Contains(files["_default"], "server =") {
		t.Errorf("wildcard mirror: %s", files["_default"])
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "registry.example.com") {
		t.Errorf("warnings = %v, want one about rewrites", warnings)
	}
}

func TestCredentials(t *testing.T) {
	t.Parallel()
	creds, err := load(t).Credentials()
	if err != nil {
		t.Fatal(err)
	}
	if c := creds["mirror.example.com:5000"]; c.Username != "alice" || c.Password != "s3cret" {
		t.Errorf("mirror credentials = %+v", c)
	}
	if c := creds["registry.local"]; c.Username != "bob" || c.Password != "hunter2" {
		t.Errorf("registry.local credentials from auth = %+v", c)
	}
}

func TestWriteKeepsOperatorsFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	own := filepath.Join(dir, "mine.example.com", "hosts.toml")
	if err := os.MkdirAll(filepath.Dir(own), 0o755); err != nil {
		t.Fatal(err)
	}
	operators := []byte("server = \"https://mine.example.com\"\n")
	if err := os.WriteFile(own, operators, 0o644); err != nil {
		t.Fatal(err)
	}
	unchanged := func(when string) {
		t.Helper()
		data, err := os.ReadFile(own)
		if err != nil {
			t.Fatalf("%s: re-reading the operator's file: %v", when, err)
		}
		if !bytes.Equal(data, operators) {
			t.Errorf("%s: operator's file is now %q, want %q", when, data, operators)
		}
	}
	if _, err := Write(dir, map[string]string{"a.example.com": Marker + "x\n", "b.example.com": Marker + "y\n"}, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	// b goes away from the YAML: its generated file is removed; the operator's stays.
	res, err := Write(dir, map[string]string{"a.example.com": Marker + "x2\n"}, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.example.com", "hosts.toml")); !os.IsNotExist(err) || len(res.Removed) != 1 || res.Removed[0] != "b.example.com" {
		t.Errorf("stale generated file kept: %v; removed %q", err, res.Removed)
	}
	unchanged("after removing a generated file")
	// Given a registry whose hosts.toml is the operator's, it is skipped.
	res, err = Write(dir, map[string]string{"mine.example.com": Marker + "z\n"}, WriteOptions{})
	if err != nil || len(res.Skipped) != 1 || res.Skipped[0] != "mine.example.com" {
		t.Errorf("writing over a hosts.toml holdfast did not write: %v, skipped %q; want it skipped", err, res.Skipped)
	}
	unchanged("after the skipped write")
}

func TestLoadRejectsUnknownKeys(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "registries.yaml")
	if err := os.WriteFile(p, []byte("mirrors:\n  docker.io:\n    endpoints: [x]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("Load of a misspelt key: %v", err)
	}
}
