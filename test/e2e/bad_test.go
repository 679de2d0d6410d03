package e2e

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// TestBadInputs puts broken archives beside good ones: the good ones import and
// pin, each bad one gives one error naming its file and the cause, and leaves no
// record, no lease and no ingest behind. On both write paths; on the direct
// one the good archives' blobs were written directly, and the store's
// directory keeps no temp file and no blob file it did not commit.
func TestBadInputs(t *testing.T) {
	forEachDaemonAndPath(t, func(t *testing.T, d *daemon, wp string) {
		dir := tempDir(t)
		imagesDir := filepath.Join(dir, "images")
		ctx := context.Background()
		none := fixture.CompressOptions{}

		good1 := build(t, fixture.ImageSpec{Names: []string{"e2e.local/good/one:1"}})
		good2 := build(t, fixture.ImageSpec{Names: []string{"e2e.local/good/two:1"}})
		writeArchive(t, filepath.Join(imagesDir, "good-one.tar"), fixture.None, none,
			func(ctx context.Context, w io.Writer) error { return fixture.WriteDockerSave(ctx, w, good1) })
		writeArchive(t, filepath.Join(imagesDir, "good-two.tar.gz"), fixture.Gzip, none,
			func(ctx context.Context, w io.Writer) error {
				return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerd}, good2)
			})

		type bad struct {
			file  string
			cause string   // a word the error must contain
			names []string // records that must not appear
		}
		var bads []bad

		// Truncated: a gzip archive cut in the middle.
		trunc := build(t, fixture.ImageSpec{Names: []string{"e2e.local/bad/truncated:1"}, Layers: fixture.UniformLayers(2, 256<<10, false, 7)})
		writeArchive(t, filepath.Join(imagesDir, "truncated.tar.gz"), fixture.None, none, func(ctx context.Context, w io.Writer) error {
			return fixture.Truncate(w, 0.6, func(w io.Writer) error {
				cw, err := fixture.Compress(w, fixture.Gzip, none)
				if err != nil {
					return err
				}
				if err := fixture.WriteOCI(ctx, cw, fixture.OCIOptions{Names: fixture.NameContainerd}, trunc); err != nil {
					return err
				}
				return cw.Close()
			})
		})
		bads = append(bads, bad{"truncated.tar.gz", "unexpected EOF", trunc.Names})

		// A bad compression frame: a valid zstd archive with bytes flipped in the middle.
		frame := build(t, fixture.ImageSpec{Names: []string{"e2e.local/bad/frame:1"}, Layers: fixture.UniformLayers(1, 256<<10, true, 8)})
		var zbuf bytes.Buffer
		zw, err := fixture.Compress(&zbuf, fixture.Zstd, none)
		if err != nil {
			t.Fatal(err)
		}
		if err := fixture.WriteOCI(ctx, zw, fixture.OCIOptions{Names: fixture.NameContainerd}, frame); err != nil {
			t.Fatal(err)
		}
		zw.Close()
		zb := zbuf.Bytes()
		for i := len(zb) / 2; i < len(zb)/2+64; i++ {
			zb[i] ^= 0xA5
		}
		if err := os.WriteFile(filepath.Join(imagesDir, "badframe.tar.zst"), zb, 0o644); err != nil {
			t.Fatal(err)
		}
		bads = append(bads, bad{"badframe.tar.zst", "zstd", frame.Names})

		// A tar that is not an image.
		writeArchive(t, filepath.Join(imagesDir, "notimage.tar"), fixture.None, none,
			func(ctx context.Context, w io.Writer) error { return fixture.WriteJunkTar(ctx, w, 9, 3) })
		bads = append(bads, bad{"notimage.tar", "not an image", nil})

		// A manifest pointing at a host-platform layer the archive lacks.
		missing := build(t, fixture.ImageSpec{Names: []string{"e2e.local/bad/missing-layer:1"}})
		writeArchive(t, filepath.Join(imagesDir, "missing-layer.tar"), fixture.None, none, func(ctx context.Context, w io.Writer) error {
			return fixture.WriteOCI(ctx, w, fixture.OCIOptions{
				Names:     fixture.NameContainerd,
				OmitBlobs: []digest.Digest{missing.Manifests[0].Layers[1].Digest()},
			}, missing)
		})
		bads = append(bads, bad{"missing-layer.tar", "layer", missing.Names})

		// An untagged docker save.
		untagged := build(t, fixture.ImageSpec{Names: nil, Layers: fixture.UniformLayers(1, 32<<10, false, 10)})
		writeArchive(t, filepath.Join(imagesDir, "untagged.tar"), fixture.None, none,
			func(ctx context.Context, w io.Writer) error { return fixture.WriteDockerSave(ctx, w, untagged) })
		bads = append(bads, bad{"untagged.tar", "name", nil})

		// An OCI entry named only by ref.name "latest".
		bare := build(t, fixture.ImageSpec{Names: []string{"e2e.local/bad/baretag:latest"}})
		writeArchive(t, filepath.Join(imagesDir, "baretag.tar"), fixture.None, none, func(ctx context.Context, w io.Writer) error {
			return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameBareTag}, bare)
		})
		bads = append(bads, bad{"baretag.tar", "latest", []string{"e2e.local/bad/baretag:latest", "docker.io/library/latest:latest", "latest"}})

		before := d.recordNames(t)
		res := d.wpSync(t, wp, filepath.Join(dir, "data"), imagesDir)
		if res.Code != 1 {
			t.Fatalf("sync exited %d, want 1\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
		}
		wpRequirePlaced(t, wp, res.Stderr, filepath.Join(imagesDir, "good-one.tar"), filepath.Join(imagesDir, "good-two.tar.gz"))
		if !strings.Contains(res.Stdout, "2 imported") || !strings.Contains(res.Stdout, "6 failed") {
			t.Errorf("summary %q, want 2 imported and 6 failed", res.Stdout)
		}
		errLines := map[string][]string{}
		for _, line := range strings.Split(res.Stderr, "\n") {
			if !strings.HasPrefix(line, "error: ") {
				continue
			}
			for _, b := range bads {
				if strings.Contains(line, filepath.Join(imagesDir, b.file)+":") {
					errLines[b.file] = append(errLines[b.file], line)
				}
			}
		}
		for _, b := range bads {
			lines := errLines[b.file]
			if len(lines) != 1 {
				t.Errorf("%s: %d error lines, want 1: %q", b.file, len(lines), lines)
				continue
			}
			if !strings.Contains(lines[0], b.cause) {
				t.Errorf("%s: error %q does not give the cause (%q)", b.file, lines[0], b.cause)
			}
			if _, ok := d.leaseOf(t, filepath.Join(imagesDir, b.file)); ok {
				t.Errorf("%s: a lease was left", b.file)
			}
			for _, n := range b.names {
				if _, ok := d.record(t, n); ok {
					t.Errorf("%s: record %s was made", b.file, n)
				}
			}
		}
		for _, n := range []string{"e2e.local/good/one:1", "e2e.local/good/two:1"} {
			rec, ok := d.record(t, n)
			if !ok || rec.Labels["io.holdfast.pinned"] != "pinned" || rec.Labels["io.cri-containerd.pinned"] != "pinned" {
				t.Errorf("good image %s not pinned: %v %v", n, ok, rec.Labels)
			}
		}
		// Only the good images' records (and their name@digest records and the CRI's) are new.
		for _, n := range d.recordNames(t) {
			if contains(before, n) || strings.HasPrefix(n, "sha256:") || strings.HasPrefix(n, "e2e.local/good/") {
				continue
			}
			t.Errorf("unexpected record %s", n)
		}
		if refs := d.ingests(t); len(refs) != 0 {
			t.Errorf("ingests left: %v", refs)
		}
		if n := len(d.holdfastLeases(t)); n != 2 {
			t.Errorf("%d holdfast leases, want 2 (the good archives')", n)
		}
		wpRequireStoreClean(t, d, nil)
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
