package registries

import (
	"strings"
	"testing"
)

// TestWithPeerMirror: the peer mirror comes first among each registry's
// endpoints, before registries.yaml's own mirrors and the registry; once;
// registries.yaml is not changed; a bad mirror or registry is an error
// naming it.
func TestWithPeerMirror(t *testing.T) {
	f := File{Mirrors: map[string]Mirror{"docker.io": {Endpoints: []string{"https://mirror.example.com", "http://10.0.0.5:30020/"}}}}
	got, err := f.WithPeerMirror("http://10.0.0.5:30020", []string{"docker.io", "ghcr.io", "_default"})
	if err != nil {
		t.Fatal(err)
	}
	if e := got.Mirrors["docker.io"].Endpoints; strings.Join(e, " ") != "http://10.0.0.5:30020 https://mirror.example.com" {
		t.Errorf("docker.io endpoints %v, want the peer mirror first, once, then registries.yaml's", e)
	}
	for _, r := range []string{"ghcr.io", "*"} {
		if e := got.Mirrors[r].Endpoints; len(e) != 1 || e[0] != "http://10.0.0.5:30020" {
			t.Errorf("%s endpoints %v, want the peer mirror", r, e)
		}
	}
	if len(f.Mirrors) != 1 || len(f.Mirrors["docker.io"].Endpoints) != 2 {
		t.Errorf("registries.yaml's mirrors changed: %+v", f.Mirrors)
	}
	files, _, err := got.HostsFiles("--peer-mirror")
	if err != nil {
		t.Fatal(err)
	}
	ghcr := files["ghcr.io"]
	if !strings.HasPrefix(ghcr, Marker+"--peer-mirror") || !strings.Contains(ghcr, `server = "https://ghcr.io"`) ||
		!strings.Contains(ghcr, `[host."http://10.0.0.5:30020"]`) {
		t.Errorf("ghcr.io's hosts.toml:\n%s", ghcr)
	}
	if _, ok := files["_default"]; !ok {
		t.Errorf("no _default hosts.toml for *: %v", files)
	}
	// An IPv6 node's address, as $(NODE_IP) expands it into the chart's flag, or in brackets.
	for _, v6 := range []string{"http://fd00::5:30020", "http://[fd00::5]:30020", "http://fd00:0:0::5:30020/"} {
		got, err := f.WithPeerMirror(v6, []string{"ghcr.io"})
		if err != nil {
			t.Errorf("mirror %q: %v", v6, err)
			continue
		}
		if e := got.Mirrors["ghcr.io"].Endpoints; len(e) != 1 || e[0] != "http://[fd00::5]:30020" {
			t.Errorf("mirror %q: ghcr.io endpoints %v, want http://[fd00::5]:30020", v6, e)
		}
	}
	for _, bad := range []struct{ mirror, reg, names string }{
		{"10.0.0.5:30020", "docker.io", "10.0.0.5:30020"},
		{"http://fd00::5", "docker.io", "fd00::5"},
		{"http://fd00::5:99999", "docker.io", "IPv6 address and a port"},
		{"http://fe80::1%eth0:30020", "docker.io", "fe80::1%eth0:30020"},
		{"http://fd00::5:30020/v2", "docker.io", "/v2"},
		{"ftp://10.0.0.5", "docker.io", "ftp://10.0.0.5"},
		{"http://10.0.0.5:30020/v2", "docker.io", "/v2"},
		{"http://10.0.0.5:30020", "docker.io/library", "docker.io/library"},
		{"http://10.0.0.5:99999", "docker.io", "99999"},
		{"http://10.0.0.5:0", "docker.io", "port \"0\""},
		{"http://10.0.0.5:30020", "quay.io:99999", "quay.io:99999"},
		{"http://10.0.0.5:30020", "quay.io:0", "quay.io:0"},
		{"http://10.0.0.5:30020", "quay.io:", "quay.io:"},
	} {
		if _, err := f.WithPeerMirror(bad.mirror, []string{bad.reg}); err == nil || !strings.Contains(err.Error(), bad.names) {
			t.Errorf("mirror %q, registry %q: %v, want an error naming %q", bad.mirror, bad.reg, err, bad.names)
		}
	}
}
