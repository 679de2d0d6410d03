package bench

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

func TestWriteFloor(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	archive := filepath.Join(dir, "a.tar")
	big := bytes.Repeat([]byte("holdfast floor "), (3*floorChunk)/15+7) // several chunks, not a multiple
	files := map[string][]byte{"blobs/sha256/one": big, "index.json": []byte(`{}`), "empty": nil}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"blobs/sha256/one", "index.json", "empty"} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(files[name]))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(files[name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "index.json"}); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(archive, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(dir, "out")
	res, err := WriteFloor(t.Context(), archive, out)
	if err != nil {
		t.Fatal(err)
	}
	wantBytes := int64(len(big) + 2)
	if res.Blobs != 3 || res.Bytes != wantBytes {
		t.Errorf("WriteFloor = %+v, want 3 blobs, %d bytes", res, wantBytes)
	}
	var want []string
	for _, b := range files {
		sum := sha256.Sum256(b)
		want = append(want, hex.EncodeToString(sum[:]))
	}
	sort.Strings(want)
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if len(got) != len(want) {
		t.Fatalf("files written: %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("files written: %v, want %v", got, want)
		}
	}
	sum := sha256.Sum256(big)
	data, err := os.ReadFile(filepath.Join(out, hex.EncodeToString(sum[:])))
	if err != nil || !bytes.Equal(data, big) {
		t.Errorf("the big blob was not written intact (err %v, %d bytes)", err, len(data))
	}

	// A cut-off archive is an error, not a short floor.
	cut := filepath.Join(dir, "cut.tar")
	if err := os.WriteFile(cut, buf.Bytes()[:2048], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteFloor(t.Context(), cut, filepath.Join(dir, "cut")); err == nil {
		t.Errorf("WriteFloor of a truncated archive: no error")
	}
}

func TestDecodeFloor(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := bytes.Repeat([]byte("holdfast decode floor "), 200_000)
	zst, err := fixture.CompressBytes(fixture.Zstd, fixture.CompressOptions{ZstdWindow: 1 << 20}, data)
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(dir, "a.tar.zst")
	if err := os.WriteFile(name, zst, 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := DecodeFloor(t.Context(), name)
	if err != nil || n != int64(len(data)) {
		t.Fatalf("DecodeFloor = %d, %v; want %d bytes", n, err, len(data))
	}

	// Cut off, or not compressed at all: an error, never a short floor.
	cut := filepath.Join(dir, "cut.tar.zst")
	if err := os.WriteFile(cut, zst[:len(zst)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeFloor(t.Context(), cut); err == nil {
		t.Errorf("DecodeFloor of a truncated stream: no error")
	}
	plain := filepath.Join(dir, "plain.tar")
	if err := os.WriteFile(plain, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeFloor(t.Context(), plain); err == nil {
		t.Errorf("DecodeFloor of an uncompressed file: no error")
	}
}
