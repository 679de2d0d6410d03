package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/archive"
)

const (
	testRepo    = "ghcr.io/holdfast-project/holdfast"
	testVersion = "v1.2.3-4-gdeadbee"
	testEpoch   = "1764760500"
)

// fakeBins writes stand-in binaries for two platforms and returns the
// -platform flags for them.
func fakeBins(t *testing.T) []string {
	t.Helper()
	root := t.TempDir()
	var flags []string
	for _, arch := range []string{"amd64", "arm64"} {
		dir := filepath.Join(root, "linux_"+arch)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, bin := range []string{"holdfast", "holdfast-reporter"} {
			// 0600 on purpose: the image's mode must not come from the file.
			if err := os.WriteFile(filepath.Join(dir, bin), []byte(bin+" for "+arch+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		flags = append(flags, "-platform", "linux/"+arch+"="+dir)
	}
	return flags
}

// mkimage runs the command and returns the archive's bytes and what it printed.
func mkimage(t *testing.T, out string, args ...string) ([]byte, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args = append([]string{"-o", out, "-repo", testRepo, "-version", testVersion, "-revision", "0123abcd",
		"-source", "https://github.com/holdfast-project/holdfast", "-bin", "holdfast", "-bin", "holdfast-reporter"}, args...)
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("mkimage %v: exit %d\n%s", args, code, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b, stdout.String()
}

func printedDigest(t *testing.T, out string) string {
	t.Helper()
	for line := range strings.Lines(out) {
		if d, ok := strings.CutPrefix(line, "digest "); ok {
			return strings.TrimSpace(d)
		}
	}
	t.Fatalf("no digest line in %q", out)
	return ""
}

func TestImageIsReproducible(t *testing.T) {
	plats := fakeBins(t)
	dir := t.TempDir()
	a, outA := mkimage(t, filepath.Join(dir, "a.tar"), append(plats, "-epoch", testEpoch)...)
	t.Setenv("SOURCE_DATE_EPOCH", testEpoch)
	b, outB := mkimage(t, filepath.Join(dir, "b.tar"), plats...)
	if !bytes.Equal(a, b) {
		t.Errorf("two builds from the same inputs differ (%d and %d bytes)", len(a), len(b))
	}
	if printedDigest(t, outA) != printedDigest(t, outB) {
		t.Errorf("digests differ: %s and %s", printedDigest(t, outA), printedDigest(t, outB))
	}
	_, outC := mkimage(t, filepath.Join(dir, "c.tar"), append(plats, "-epoch", "1764760501")...)
	if printedDigest(t, outA) == printedDigest(t, outC) {
		t.Errorf("another epoch gave the same digest %s", printedDigest(t, outA))
	}
}

// memStore keeps what a walk writes.
type memStore struct {
	mu    sync.Mutex
	blobs map[digest.Digest][]byte
}

func (s *memStore) Has(context.Context, digest.Digest) (bool, error) { return false, nil }

func (s *memStore) Put(_ context.Context, expected digest.Digest, size int64, r io.Reader) (digest.Digest, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return "", err
	}
	d := digest.FromBytes(b)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.blobs[d] = b
	return d, nil
}

func TestHoldfastReadsTheImage(t *testing.T) {
	plats := fakeBins(t)
	dir := t.TempDir()
	nameFile := filepath.Join(dir, "name")
	b, out := mkimage(t, filepath.Join(dir, "image.tar"), append(plats, "-epoch", testEpoch, "-name-out", nameFile)...)
	if got, err := os.ReadFile(nameFile); err != nil || string(got) != testRepo+":"+testVersion+"\n" {
		t.Errorf("name file: %q, %v; want %q", got, err, testRepo+":"+testVersion+"\n")
	}

	st := &memStore{blobs: map[digest.Digest][]byte{}}
	res, err := archive.Walk(context.Background(), bytes.NewReader(b), st)
	if err != nil {
		t.Fatalf("holdfast's walker: %v", err)
	}
	if res.Format != archive.FormatOCI || len(res.Images) != 1 {
		t.Fatalf("walk: format %s, images %+v; want one OCI image", res.Format, res.Images)
	}
	img := res.Images[0]
	if img.Name != testRepo+":"+testVersion || img.Target.MediaType != ocispec.MediaTypeImageIndex {
		t.Errorf("image %s (%s); want %s:%s, an index", img.Name, img.Target.MediaType, testRepo, testVersion)
	}
	if string(img.Target.Digest) != printedDigest(t, out) {
		t.Errorf("target %s, printed digest %s", img.Target.Digest, printedDigest(t, out))
	}

	var idx ocispec.Index
	mustJSON(t, res.Docs[img.Target.Digest], &idx)
	var got []string
	epoch := time.Unix(1764760500, 0).UTC()
	for _, m := range idx.Manifests {
		p := m.Platform.OS + "/" + m.Platform.Architecture
		got = append(got, p)
		var man ocispec.Manifest
		mustJSON(t, res.Docs[m.Digest], &man)
		var cfg ocispec.Image
		mustJSON(t, res.Docs[man.Config.Digest], &cfg)
		if cfg.OS+"/"+cfg.Architecture != p {
			t.Errorf("%s: config says %s/%s", p, cfg.OS, cfg.Architecture)
		}
		if cfg.Created == nil || !cfg.Created.Equal(epoch) {
			t.Errorf("%s: created %v; want %v", p, cfg.Created, epoch)
		}
		if !slices.Equal(cfg.Config.Entrypoint, []string{"/holdfast"}) || !slices.Equal(cfg.Config.Cmd, []string{"run"}) {
			t.Errorf("%s: entrypoint %q cmd %q", p, cfg.Config.Entrypoint, cfg.Config.Cmd)
		}
		for k, v := range map[string]string{
			"org.opencontainers.image.version":  testVersion,
			"org.opencontainers.image.revision": "0123abcd",
			"org.opencontainers.image.source":   "https://github.com/holdfast-project/holdfast",
			"org.opencontainers.image.created":  "2025-12-03T11:15:00Z",
		} {
			if cfg.Config.Labels[k] != v {
				t.Errorf("%s: label %s = %q; want %q", p, k, cfg.Config.Labels[k], v)
			}
		}
		if len(man.Layers) != 1 || man.Layers[0].MediaType != ocispec.MediaTypeImageLayerGzip {
			t.Fatalf("%s: layers %+v; want one gzip layer", p, man.Layers)
		}
		checkLayer(t, p, st.blobs[man.Layers[0].Digest], epoch)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("platforms %v; want linux/amd64 and linux/arm64", got)
	}
}

// checkLayer checks the gzip header and every entry of a layer.
func checkLayer(t *testing.T, p string, b []byte, epoch time.Time) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: layer: %v", p, err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("%s: gzip header name %q time %v; want neither", p, zr.Name, zr.ModTime)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: layer: %v", p, err)
		}
		names = append(names, h.Name)
		if h.Typeflag != tar.TypeReg || h.Mode != 0o755 || h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(epoch) {
			t.Errorf("%s: %s: type %c mode %o owner %d:%d mtime %v", p, h.Name, h.Typeflag, h.Mode, h.Uid, h.Gid, h.ModTime)
		}
		body, _ := io.ReadAll(tr)
		arch := strings.TrimPrefix(p, "linux/")
		if want := h.Name + " for " + arch + "\n"; string(body) != want {
			t.Errorf("%s: %s holds %q; want %q", p, h.Name, body, want)
		}
	}
	if !slices.Equal(names, []string{"holdfast", "holdfast-reporter"}) {
		t.Errorf("%s: layer entries %v", p, names)
	}
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decoding %q: %v", b, err)
	}
}

func TestBadUsage(t *testing.T) {
	plats := fakeBins(t)
	out := filepath.Join(t.TempDir(), "x.tar")
	for name, args := range map[string][]string{
		"no registry":  append([]string{"-o", out, "-repo", "holdfast", "-version", "v1", "-bin", "holdfast", "-epoch", "1"}, plats...),
		"bad tag":      append([]string{"-o", out, "-repo", testRepo, "-version", "v1+x", "-bin", "holdfast", "-epoch", "1"}, plats...),
		"no epoch":     append([]string{"-o", out, "-repo", testRepo, "-version", "v1", "-bin", "holdfast", "-epoch", ""}, plats...),
		"no platforms": {"-o", out, "-repo", testRepo, "-version", "v1", "-bin", "holdfast", "-epoch", "1"},
		"entrypoint":   append([]string{"-o", out, "-repo", testRepo, "-version", "v1", "-bin", "holdfast-reporter", "-epoch", "1"}, plats...),
		"bin path":     append([]string{"-o", out, "-repo", testRepo, "-version", "v1", "-bin", "../holdfast", "-epoch", "1"}, plats...),
	} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("%s: exit %d; want 2\n%s", name, code, stderr.String())
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("bad usage wrote %s", out)
	}
	// A missing binary is named.
	var stdout, stderr bytes.Buffer
	args := append([]string{"-o", out, "-repo", testRepo, "-version", "v1", "-bin", "holdfast", "-bin", "nosuch", "-epoch", "1"}, plats...)
	if code := run(args, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "nosuch") {
		t.Errorf("missing binary: exit %d, %q", code, stderr.String())
	}
}

// TestWrongArchRefused: a binary built for another architecture than its
// platform's is refused, naming it.
func TestWrongArchRefused(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	dir := filepath.Join(t.TempDir(), "linux_"+other)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "holdfast"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	out := filepath.Join(t.TempDir(), "x.tar")
	args := []string{"-o", out, "-repo", testRepo, "-version", "v1", "-bin", "holdfast", "-epoch", "1", "-platform", "linux/" + other + "=" + dir}
	if code := run(args, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), filepath.Join(dir, "holdfast")) {
		t.Errorf("a %s binary as linux/%s: exit %d, %q; want 1 naming the file", runtime.GOARCH, other, code, stderr.String())
	}
	// Its own architecture is fine.
	args[len(args)-1] = "linux/" + runtime.GOARCH + "=" + dir
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Errorf("a %s binary as linux/%s: exit %d, %q", runtime.GOARCH, runtime.GOARCH, code, stderr.String())
	}
}
