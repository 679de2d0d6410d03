package archive_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/archive/zstdframe"
	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/pass"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
)

// TestSeekableZstdImport imports a seekable .tar.zst as a pass does: a good
// one is pinned; one whose seek table lies (read at the very end of the
// file) fails, the failure naming the file and the frame, and leaves no
// record and no lease.
func TestSeekableZstdImport(t *testing.T) {
	ctx := context.Background()
	img, err := fixture.Build(ctx, fixture.ImageSpec{
		Names:  []string{"example.com/seekable/app:1"},
		Layers: fixture.UniformLayers(2, 3<<20, true, 5),
	})
	if err != nil {
		t.Fatal(err)
	}
	var tarb bytes.Buffer
	if err := fixture.WriteHybrid(ctx, &tarb, img); err != nil {
		t.Fatal(err)
	}
	var z bytes.Buffer
	w := zstdframe.NewWriter(&z, zstdframe.Options{FrameSize: 256 << 10})
	if _, err := w.Write(tarb.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	good := z.Bytes()
	// The seek table's last entry (then the footer): its compressed size.
	lying := bytes.Clone(good)
	last := len(lying) - 9 - 12
	binary.LittleEndian.PutUint32(lying[last:], binary.LittleEndian.Uint32(lying[last:])+1)

	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"good", good, ""},
		{"lying", lying, "says frame"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "app.tar.zst")
			if err := os.WriteFile(path, tc.b, 0o644); err != nil {
				t.Fatal(err)
			}
			rt := fake.New()
			sum := pass.Sync(ctx, rt, pass.Config{ImageDirs: []string{dir}})
			_, recorded := rt.Record("example.com/seekable/app:1")
			leases, _ := rt.Sources(ctx)
			if tc.want == "" {
				if sum.Failed != 0 || !recorded {
					t.Fatalf("import: %d failed (%v), recorded %v", sum.Failed, sum.Failures, recorded)
				}
				return
			}
			if sum.Failed != 1 || len(sum.Failures) != 1 {
				t.Fatalf("%d failed, failures %v; want the archive's", sum.Failed, sum.Failures)
			}
			msg := sum.Failures[0].Error()
			t.Log(msg)
			if !strings.Contains(msg, path) || !strings.Contains(msg, "zstd: the seek table "+tc.want) {
				t.Fatalf("failure %q does not name the file and the seek table's lie", msg)
			}
			if recorded || len(leases) != 0 {
				t.Fatalf("a failed import left a record (%v) or leases (%d)", recorded, len(leases))
			}
		})
	}
}
