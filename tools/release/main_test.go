package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func TestChartVersion(t *testing.T) {
	for v, want := range map[string]string{
		"1.2.0":         "1.2.0",
		"1.2.0-rc.1":    "1.2.0-rc.1",
		"1.2.0+build.5": "1.2.0+build.5",
		"00ea51a":       "0.0.0-dev.00ea51a",
		"00ea51a-dirty": "0.0.0-dev.00ea51a-dirty",
		"0123456":       "0.0.0-dev.g0123456",
		"1.2":           "0.0.0-dev.1.2",
		"v1.2.0-3-gabc": "0.0.0-dev.v1.2.0-3-gabc",
		"1.2.0-4-g0abc": "1.2.0-4-g0abc",
	} {
		got := chartVersion(v)
		if got != want {
			t.Errorf("chartVersion(%q) = %q, want %q", v, got, want)
		}
		if !semVer.MatchString(got) {
			t.Errorf("chartVersion(%q) = %q is no SemVer", v, got)
		}
	}
}

func TestFileVersion(t *testing.T) {
	for in, want := range map[string]string{"v1.2.0": "1.2.0", "00ea51a-dirty": "00ea51a-dirty", "1.0": "1.0"} {
		if got, err := fileVersion(in); err != nil || got != want {
			t.Errorf("fileVersion(%q) = %q, %v, want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "v", "../x", "a/b", "v..", "1 2"} {
		if got, err := fileVersion(in); err == nil {
			t.Errorf("fileVersion(%q) = %q, want an error", in, got)
		}
	}
}

const values = `# comment
image:
  repository: ghcr.io/holdfast-project/holdfast
  # Default: the chart's appVersion.
  tag: ""
  pullPolicy: IfNotPresent
imagePullSecrets: []
other:
  tag: keep
`

func TestSetImage(t *testing.T) {
	const d = "sha256:5a5464455900a3f3d66d15c65571067fbd659a89ca410fc98554f8b6218872f3"
	const repo = "registry.example/holdfast"
	out, err := setImage([]byte(values), repo, "v1.2.0", d)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(values, "  tag: \"\"\n", "  tag: \"v1.2.0\"\n  digest: \""+d+"\"\n", 1)
	want = strings.Replace(want, "  repository: ghcr.io/holdfast-project/holdfast\n", "  repository: \""+repo+"\"\n", 1)
	if string(out) != want {
		t.Errorf("setImage without a digest line:\n%s\nwant\n%s", out, want)
	}
	// With a digest line already: replaced, nothing added.
	withDigest := strings.Replace(values, "  pullPolicy:", "  digest: \"\"\n  pullPolicy:", 1)
	out, err = setImage([]byte(withDigest), repo, "1.2.0", d)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(out), "digest:") != 1 || !strings.Contains(string(out), "  digest: \""+d+"\"\n") || !strings.Contains(string(out), "  tag: keep") {
		t.Errorf("setImage with a digest line:\n%s", out)
	}
	if _, err := setImage([]byte("image: {}\n"), repo, "1", d); err == nil {
		t.Error("setImage of values without image.tag: no error")
	}
	if _, err := setImage([]byte("image:\n  tag: \"\"\n"), repo, "1", d); err == nil {
		t.Error("setImage of values without image.repository: no error")
	}
}

func TestSetChartVersion(t *testing.T) {
	in := "apiVersion: v2\nname: holdfast\nversion: 0.1.0\n# The image tag defaults to this.\nappVersion: \"0.1.0\"\n"
	out, err := setChartVersion([]byte(in), "1.2.0")
	if err != nil {
		t.Fatal(err)
	}
	if want := "apiVersion: v2\nname: holdfast\nversion: 1.2.0\n# The image tag defaults to this.\nappVersion: \"1.2.0\"\n"; string(out) != want {
		t.Errorf("setChartVersion:\n%s\nwant\n%s", out, want)
	}
	if _, err := setChartVersion([]byte("name: x\n"), "1.2.0"); err == nil {
		t.Error("setChartVersion of a Chart.yaml without version: no error")
	}
}

// TestNormalizeTgz: two packages of the same files written at other times,
// by other owners, give the same bytes, with every entry timed at the epoch.
func TestNormalizeTgz(t *testing.T) {
	created := time.Unix(1700000000, 0).UTC()
	mk := func(mtime time.Time, uid int, name string) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Name, zw.ModTime = name, mtime
		tw := tar.NewWriter(zw)
		for _, f := range []struct{ name, body string }{{"holdfast/Chart.yaml", "name: holdfast\n"}, {"holdfast/values.yaml", "a: 1\n"}} {
			tw.WriteHeader(&tar.Header{Name: f.name, Size: int64(len(f.body)), Mode: 0o644, ModTime: mtime, Uid: uid, Uname: "u", Typeflag: tar.TypeReg})
			tw.Write([]byte(f.body))
		}
		tw.Close()
		zw.Close()
		return buf.Bytes()
	}
	a, err := normalizeTgz(mk(time.Now(), 1000, "a"), created)
	if err != nil {
		t.Fatal(err)
	}
	b, err := normalizeTgz(mk(time.Now().Add(time.Hour), 0, "b"), created)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("two packages of the same files normalize to different bytes")
	}
	zr, err := gzip.NewReader(bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("gzip header: name %q, time %v", zr.Name, zr.ModTime)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
		if !hdr.ModTime.Equal(created) || hdr.Uid != 0 || hdr.Uname != "" {
			t.Errorf("%s: time %v, uid %d, uname %q", hdr.Name, hdr.ModTime, hdr.Uid, hdr.Uname)
		}
	}
	if strings.Join(names, ",") != "holdfast/Chart.yaml,holdfast/values.yaml" {
		t.Errorf("entries %q", names)
	}
}

func TestWriteSums(t *testing.T) {
	dist := t.TempDir()
	for name, body := range map[string]string{"b.txt": "b", "sbom/a.json": "{}", "SHA256SUMS.sigstore.json": "x", ".x.partial": "p"} {
		os.MkdirAll(filepath.Dir(filepath.Join(dist, name)), 0o755)
		os.WriteFile(filepath.Join(dist, name), []byte(body), 0o644)
	}
	paths, err := writeSums(dist, "SHA256SUMS")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	want := "3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d  b.txt\n" +
		"44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a  sbom/a.json\n"
	if string(b) != want || strings.Join(paths, ",") != "b.txt,sbom/a.json" {
		t.Errorf("SHA256SUMS:\n%s\nwant\n%s(paths %q)", b, want, paths)
	}
}

func TestCheckKey(t *testing.T) {
	key := filepath.Join(t.TempDir(), "k.key")
	os.WriteFile(key, []byte("PEM"), 0o600)
	base := options{Version: "v1.0.0", Dist: "dist"}
	for _, c := range []struct {
		what    string
		o       options
		env     string
		wantRef string
		wantErr string
	}{
		{"a file", options{Key: key}, "", key, ""},
		{"the environment", options{}, "PEM", "env://" + keyEnv, ""},
		{"a file before the environment", options{Key: key}, "PEM", key, ""},
		{"none", options{}, "", "", "RELEASE_KEY=FILE"},
		{"unsigned", options{Unsigned: true}, "", "", ""},
		{"unsigned and a key", options{Unsigned: true, Key: key}, "", "", "give one of them"},
		{"unsigned and the environment", options{Unsigned: true}, "PEM", "", "give one of them"},
		{"a missing file", options{Key: key + ".gone"}, "", "", "no such file"},
	} {
		o := base
		o.Key, o.Unsigned = c.o.Key, c.o.Unsigned
		err := o.check(c.env)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v", c.what, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: error %v, want one saying %q", c.what, err, c.wantErr)
		case c.wantErr == "" && o.keyRef != c.wantRef:
			t.Errorf("%s: key %q, want %q", c.what, o.keyRef, c.wantRef)
		}
	}
}

// TestRegistryTakesOnlyItsCredential: the registry the release signs through refuses whoever lacks its one
// credential (another local user who finds its port): no push, no read of its referrers; with it, both work.
func TestRegistryTakesOnlyItsCredential(t *testing.T) {
	r, err := startRegistry()
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	layer := static.NewLayer([]byte("not the release's"), types.OCILayer)
	for _, opts := range [][]remote.Option{nil, {remote.WithAuth(&authn.Basic{Username: r.auth.Username, Password: "guessed"})}} {
		if err := remote.WriteLayer(r.repo, layer, opts...); err == nil || !strings.Contains(err.Error(), "401") && !strings.Contains(err.Error(), "UNAUTHORIZED") {
			t.Errorf("a push without the registry's credential: %v, want 401", err)
		}
	}
	d, err := layer.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Referrers(r.repo.Digest(d.String())); err == nil {
		t.Error("the referrers read without the registry's credential")
	}
	if err := remote.WriteLayer(r.repo, layer, r.opts...); err != nil {
		t.Errorf("a push with the registry's credential: %v", err)
	}
	dir := t.TempDir()
	if err := r.dockerConfig(dir); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, "config.json"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("cosign's config.json: %v %v, want 0600", st, err)
	}
}
