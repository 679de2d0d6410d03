package source

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// someBytes is n bytes of deterministic noise that never starts a zstd frame.
func someBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	b[0] = 'x'
	return b
}

// cut writes b in parts of at most size bytes at name(first), name(first+1), ...
// (each an hour old) and returns their paths.
func cut(t *testing.T, b []byte, size int, name func(int) string, first int) []string {
	t.Helper()
	var paths []string
	past := time.Now().Add(-time.Hour)
	for i := 0; len(b) > 0; i++ {
		n := min(size, len(b))
		p := name(first + i)
		write(t, p, b[:n])
		if err := os.Chtimes(p, past, past); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
		b = b[n:]
	}
	return paths
}

// zarfSplit writes b as a Zarf split set at base.part001... with its
// part000 (whose fields meta may change) and returns every path, part000 first.
func zarfSplitOf(t *testing.T, b []byte, size int, base string, meta func(*zarfMeta)) []string {
	t.Helper()
	data := cut(t, b, size, func(n int) string { return fmt.Sprintf("%s.part%03d", base, n) }, 1)
	m := zarfMeta{Sha256Sum: fmt.Sprintf("%x", sha256.Sum256(b)), Bytes: int64(len(b)), Count: len(data)}
	if meta != nil {
		meta(&m)
	}
	j, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	write(t, base+".part000", j)
	return append([]string{base + ".part000"}, data...)
}

func numberedName(base string) func(int) string {
	return func(n int) string { return fmt.Sprintf("%s.%03d", base, n) }
}

func sourceAt(res Result, path string) (Source, bool) {
	i := slices.IndexFunc(res.Sources, func(s Source) bool { return s.Path == path })
	if i < 0 {
		return Source{}, false
	}
	return res.Sources[i], true
}

// TestSplitBundlesAreOneSource: the parts of a split archive are one archive
// source named as the archive joined, whatever the naming: Hauler's .001,
// legacy Hauler's haul_N, Zarf's .partNNN with part000, split's .000, and a
// lone .001. Its parts are listed in order, its size is theirs joined, its
// mtime the newest part's; no part is a source of its own.
func TestSplitBundlesAreOneSource(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := someBytes(10000, 1)
	haul := filepath.Join(dir, "haul.tar.zst")
	legacy := filepath.Join(dir, "old", "haul.tar.zst")
	zarf := filepath.Join(dir, "zarf-package-app-amd64-1.0.tar.zst")
	gnu := filepath.Join(dir, "app.tar")
	lone := filepath.Join(dir, "lone.tar.gz")
	want := map[string][]string{
		haul:   cut(t, data, 3000, numberedName(haul), 1),
		legacy: cut(t, data, 4000, func(n int) string { return filepath.Join(dir, "old", fmt.Sprintf("haul_%d.tar.zst", n)) }, 0),
		zarf:   zarfSplitOf(t, data, 2500, zarf, nil),
		gnu:    cut(t, data, 6000, numberedName(gnu), 0),
		lone:   cut(t, data, len(data), numberedName(lone), 1),
	}
	newest := time.Now().Add(-time.Minute).Truncate(time.Second)
	if err := os.Chtimes(want[haul][1], newest, newest); err != nil {
		t.Fatal(err)
	}

	res := Scan([]string{dir})
	if len(res.Errors) != 0 {
		t.Fatalf("errors: %v", res.Errors)
	}
	if len(res.Sources) != len(want) {
		t.Errorf("%d sources, want %d: %+v", len(res.Sources), len(want), res.Sources)
	}
	for path, parts := range want {
		src, ok := sourceAt(res, path)
		switch {
		case !ok:
			t.Errorf("%s: no source", path)
		case src.Kind != Archive || !slices.Equal(src.Parts, parts) || src.Incomplete != "":
			t.Errorf("%s: kind %s, parts %v, incomplete %q; want an archive of %v", path, src.Kind, src.Parts, src.Incomplete, parts)
		case src.Size != int64(len(data)):
			t.Errorf("%s: size %d, want %d (the parts joined, without a part list)", path, src.Size, len(data))
		case !strings.HasPrefix(src.Identity, fmt.Sprintf("parts=%d,", len(parts))):
			t.Errorf("%s: identity %q", path, src.Identity)
		}
	}
	if src, _ := sourceAt(res, haul); src.MtimeNs != newest.UnixNano() {
		t.Errorf("mtime %v, want the newest part's, %v", time.Unix(0, src.MtimeNs), newest)
	}
}

// TestSplitIncomplete: parts that do not make the whole archive are still
// one source, which says what is wrong.
func TestSplitIncomplete(t *testing.T) {
	t.Parallel()
	data := someBytes(9000, 2)
	for _, tc := range []struct {
		name   string
		bundle string
		write  func(t *testing.T, path string)
		why    string
	}{
		{"a gap", "haul.tar.zst", func(t *testing.T, path string) {
			parts := cut(t, data, 3000, numberedName(path), 1)
			os.Remove(parts[1])
		}, "part haul.tar.zst.002 of 3 is missing"},
		{"the first of a lone later part", "app.tar", func(t *testing.T, path string) {
			cut(t, data, 9000, numberedName(path), 2)
		}, "part app.tar.001 of 2 is missing"},
		{"legacy haul without its first", "haul.tar.zst", func(t *testing.T, path string) {
			parts := cut(t, data, 3000, func(n int) string { return filepath.Join(filepath.Dir(path), fmt.Sprintf("haul_%d.tar.zst", n)) }, 0)
			os.Remove(parts[0])
		}, "part haul_0.tar.zst of 3 is missing"},
		{"zarf short of its count", "p.tar.zst", func(t *testing.T, path string) {
			parts := zarfSplitOf(t, data, 3000, path, nil)
			os.Remove(parts[3])
		}, "part p.tar.zst.part003 of 3 is missing"},
		{"zarf past its count", "p.tar.zst", func(t *testing.T, path string) {
			zarfSplitOf(t, data, 3000, path, func(m *zarfMeta) { m.Count = 2 })
		}, "p.tar.zst.part000 counts 2 parts, and there is p.tar.zst.part003"},
		{"zarf of another size", "p.tar.zst", func(t *testing.T, path string) {
			zarfSplitOf(t, data, 3000, path, func(m *zarfMeta) { m.Bytes++ })
		}, "the parts hold 9000 bytes, p.tar.zst.part000 says 9001"},
		{"zarf without part000", "p.tar.zst", func(t *testing.T, path string) {
			os.Remove(zarfSplitOf(t, data, 3000, path, nil)[0])
		}, "p.tar.zst.part000 is missing"},
		{"zarf part000 cut short", "p.tar.zst", func(t *testing.T, path string) {
			zarfSplitOf(t, data, 3000, path, nil)
			write(t, path+".part000", []byte(`{"Sha256Sum":"ab`))
		}, "p.tar.zst.part000 is not a part list"},
		{"zarf part000 without a sum", "p.tar.zst", func(t *testing.T, path string) {
			zarfSplitOf(t, data, 3000, path, func(m *zarfMeta) { m.Sha256Sum = "" })
		}, "p.tar.zst.part000 gives no sha256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, tc.bundle)
			tc.write(t, path)
			res := Scan([]string{dir})
			if len(res.Errors) != 0 || len(res.Sources) != 1 {
				t.Fatalf("errors %v, sources %+v; want one source", res.Errors, res.Sources)
			}
			src := res.Sources[0]
			if src.Path != path || len(src.Parts) == 0 || !strings.HasPrefix(src.Incomplete, tc.why) {
				t.Errorf("source %s (parts %v): incomplete %q, want %s: %q", src.Path, src.Parts, src.Incomplete, path, tc.why)
			}
			if _, err := OpenSource(src); err == nil || !strings.Contains(err.Error(), tc.why) {
				t.Errorf("OpenSource: %v, want an error saying %q", err, tc.why)
			}
		})
	}
}

// TestOrdinaryFilesAreNotGrouped: only numbered names of archives are parts,
// haul_N only for Hauler's default name and only when it does not start a
// zstd frame, and a whole file beside its parts is read, not the parts.
func TestOrdinaryFilesAreNotGrouped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	zst := append(slices.Clone(zstdMagic), someBytes(100, 3)...)
	write(t, filepath.Join(dir, "notes.001"), []byte("not an archive, numbered\n"))
	write(t, filepath.Join(dir, "app.tar"), tarBytes(t))
	write(t, filepath.Join(dir, "app.tar.001"), []byte("a part beside the whole"))
	write(t, filepath.Join(dir, "images_0.tar.zst"), zst)
	write(t, filepath.Join(dir, "images_1.tar.zst"), zst)
	write(t, filepath.Join(dir, "two.tar.zst.01"), zst)
	write(t, filepath.Join(dir, "copy.tar.zst.001.bak"), []byte("a backup of a part"))
	write(t, filepath.Join(dir, "hauls", "haul_0.tar.zst"), zst)
	write(t, filepath.Join(dir, "hauls", "haul_1.tar.zst"), zst)
	write(t, filepath.Join(dir, "hauls", "haul_01.tar.zst"), zst)

	res := Scan([]string{dir})
	var got []string
	for _, s := range res.Sources {
		rel, _ := filepath.Rel(dir, s.Path)
		got = append(got, fmt.Sprintf("%s%v", rel, len(s.Parts)))
	}
	want := []string{"app.tar0", "hauls/haul.tar.zst1", "hauls/haul_01.tar.zst0", "hauls/haul_1.tar.zst0", "images_0.tar.zst0", "images_1.tar.zst0", "two.tar.zst.010"}
	if !slices.Equal(got, want) {
		t.Errorf("sources (path and number of parts) %v, want %v", got, want)
	}
	if len(res.Errors) != 1 || !strings.Contains(res.Errors[0].Error(), filepath.Join(dir, "app.tar")+" is there whole: its split parts beside it (app.tar.001) are not read") {
		t.Errorf("errors %v, want one naming app.tar and app.tar.001", res.Errors)
	}
}

// TestSplitIdentity: any part changing, appearing or going changes the
// identity of the split archive; nothing changing keeps it.
func TestSplitIdentity(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := filepath.Join(dir, "p.tar.zst")
	parts := zarfSplitOf(t, someBytes(9000, 4), 3000, base, nil)
	identity := func() string {
		t.Helper()
		res := Scan([]string{dir})
		if len(res.Sources) != 1 {
			t.Fatalf("sources %+v", res.Sources)
		}
		return res.Sources[0].Identity
	}
	seen := map[string]string{}
	note := func(what string) {
		t.Helper()
		id := identity()
		for before, was := range seen {
			if was == id {
				t.Errorf("%s: identity as %s: %s", what, before, id)
			}
		}
		seen[what] = id
	}
	note("first")
	if again := identity(); again != seen["first"] {
		t.Errorf("identity moved without a change: %s, then %s", seen["first"], again)
	}
	later := time.Now().Add(-30 * time.Minute)
	write(t, parts[2], someBytes(3000, 5)) // the same size, other bytes
	os.Chtimes(parts[2], later, later)
	note("a middle part rewritten")
	write(t, parts[0], []byte(`{"Sha256Sum":"`+strings.Repeat("0", 64)+`","Bytes":9000,"Count":3}`))
	os.Chtimes(parts[0], later.Add(time.Second), later.Add(time.Second))
	note("part000 rewritten")
	write(t, base+".part004", []byte("one more"))
	note("a part added")
	os.Remove(parts[3])
	note("a part removed")
}

// TestOpenSourceJoinsParts: a split archive reads as its parts joined, byte
// for byte; each part is opened when the one before ends.
func TestOpenSourceJoinsParts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := someBytes(10000, 6)
	path := filepath.Join(dir, "haul.tar.zst")
	parts := cut(t, data, 3000, numberedName(path), 1)
	src, _ := sourceAt(Scan([]string{dir}), path)
	r, err := OpenSource(src)
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 100)
	if _, err := r.Read(head); err != nil {
		t.Fatal(err)
	}
	// Renamed once the first is open: the last is opened when reached.
	if err := os.Rename(parts[3], parts[3]+".moved"); err != nil {
		t.Fatal(err)
	}
	rest, err := readAll(r)
	if err == nil || !strings.Contains(err.Error(), parts[3]) {
		t.Errorf("reading with the last part gone: %v, want an error naming %s", err, parts[3])
	}
	r.Close()
	if err := os.Rename(parts[3]+".moved", parts[3]); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(append(head, rest...), data[:len(head)+len(rest)]) || len(rest) != 9000-len(head) {
		t.Errorf("read %d bytes before the gone part, want the first 3 parts' %d, as they are", len(head)+len(rest), 9000)
	}

	for _, src := range []Source{src, zarfSource(t, data, 3000, nil)} {
		r, err := OpenSource(src)
		if err != nil {
			t.Fatal(err)
		}
		got, err := readAll(r)
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: read %d bytes (%v), want the %d bytes that were split", src.Path, len(got), err, len(data))
		}
		if err := r.Close(); err != nil {
			t.Errorf("%s: close: %v", src.Path, err)
		}
	}
}

// zarfSource splits data into a Zarf set of parts of size bytes, and scans it.
func zarfSource(t *testing.T, data []byte, size int, meta func(*zarfMeta)) Source {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "zarf-package-app-amd64.tar.zst")
	zarfSplitOf(t, data, size, path, meta)
	src, ok := sourceAt(Scan([]string{dir}), path)
	if !ok || src.Incomplete != "" {
		t.Fatalf("zarf set: %+v", src)
	}
	return src
}

// readAll reads r in small, uneven reads, to its end or first error.
func readAll(r interface{ Read([]byte) (int, error) }) ([]byte, error) {
	var out []byte
	buf := make([]byte, 777)
	for {
		n, err := r.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			if err.Error() == "EOF" {
				return out, nil
			}
			return out, err
		}
	}
}

// TestOpenSourceChecksZarf: the bytes of a Zarf set must be what its
// part000 says: otherwise the last Read fails, and Close too, naming the
// bundle and what differs. Close before the end says the sum was not checked.
func TestOpenSourceChecksZarf(t *testing.T) {
	t.Parallel()
	data := someBytes(10000, 7)
	other := fmt.Sprintf("%x", sha256.Sum256([]byte("other")))
	src := zarfSource(t, data, 3000, func(m *zarfMeta) { m.Sha256Sum = other })
	r, err := OpenSource(src)
	if err != nil {
		t.Fatal(err)
	}
	got, err := readAll(r)
	want := fmt.Sprintf("zarf-package-app-amd64.tar.zst: its parts join to sha256 %x, zarf-package-app-amd64.tar.zst.part000 says %s", sha256.Sum256(data), other)
	if err == nil || err.Error() != want || len(got) != len(data) {
		t.Errorf("read %d bytes, then %v; want all %d, then %q", len(got), err, len(data), want)
	}
	if err := r.Close(); err == nil || err.Error() != want {
		t.Errorf("close: %v, want %q", err, want)
	}

	// A part that grew since the scan: more bytes than part000 says.
	src = zarfSource(t, data, 3000, nil)
	f, err := os.OpenFile(src.Parts[2], os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("more"))
	f.Close()
	r, _ = OpenSource(src)
	if _, err := readAll(r); err == nil || !strings.Contains(err.Error(), "its parts hold more than the 10000 bytes zarf-package-app-amd64.tar.zst.part000 says") {
		t.Errorf("a part grown since the scan: %v", err)
	}
	r.Close()

	r, _ = OpenSource(zarfSource(t, data, 3000, nil))
	r.Read(make([]byte, 10))
	if err := r.Close(); err == nil || !strings.Contains(err.Error(), "zarf-package-app-amd64.tar.zst: not read to its end") {
		t.Errorf("closed before its end: %v", err)
	}
}

// TestIdentifySplit: holdfast import given any part of a split archive, or
// its name without the part suffix, takes the whole set; a part beside the
// whole file is refused.
func TestIdentifySplit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := someBytes(9000, 8)
	haul := filepath.Join(dir, "haul.tar.zst")
	parts := cut(t, data, 3000, numberedName(haul), 1)
	zarf := filepath.Join(dir, "p.tar.zst")
	zparts := zarfSplitOf(t, data, 3000, zarf, nil)
	for _, tc := range []struct{ given, bundle string }{
		{haul, haul}, {parts[1], haul}, {parts[2], haul},
		{zarf, zarf}, {zparts[0], zarf}, {zparts[3], zarf},
	} {
		src, err := Identify(tc.given)
		if err != nil || src.Path != tc.bundle || len(src.Parts) != 3+btoi(tc.bundle == zarf) || src.Incomplete != "" || src.Size != 9000 {
			t.Errorf("Identify(%s): %+v, %v; want the whole of %s", tc.given, src, err, tc.bundle)
		}
	}
	os.Remove(parts[1])
	if src, err := Identify(parts[0]); err != nil || src.Incomplete != "part haul.tar.zst.002 of 3 is missing" {
		t.Errorf("Identify with a part gone: %+v, %v", src, err)
	}
	write(t, haul, []byte("whole"))
	if _, err := Identify(parts[0]); err == nil || !strings.Contains(err.Error(), "is there whole: import that") {
		t.Errorf("Identify of a part beside the whole file: %v", err)
	}
	if _, err := Identify(filepath.Join(dir, "none.tar.zst")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("Identify of nothing: %v", err)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestLayoutWithoutOCILayoutFile: a directory with index.json and blobs/ is
// an OCI layout even without oci-layout (Hauler's --containerd store); one
// with index.json alone is not.
func TestLayoutWithoutOCILayoutFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	index := []byte(`{"schemaVersion":2,"manifests":[]}`)
	write(t, filepath.Join(dir, "store", "index.json"), index)
	write(t, filepath.Join(dir, "store", "blobs", "sha256", "inner.tar"), tarBytes(t))
	write(t, filepath.Join(dir, "loose", "index.json"), index)
	res := Scan([]string{dir})
	if len(res.Sources) != 1 || res.Sources[0].Path != filepath.Join(dir, "store") || res.Sources[0].Kind != OCIDir {
		t.Errorf("sources %+v, want the store dir, an OCI layout", res.Sources)
	}
	if src, err := Identify(filepath.Join(dir, "store")); err != nil || src.Kind != OCIDir {
		t.Errorf("Identify(store): %+v, %v", src, err)
	}
	if _, err := Identify(filepath.Join(dir, "loose")); err == nil {
		t.Error("Identify of a dir with index.json alone: no error")
	}
}

// TestUnreadablePartKeepsItsArchive: a part that cannot be read (a dangling
// symlink) is an error, and its archive counts as unreadable: what holdfast
// has from it is kept.
func TestUnreadablePartKeepsItsArchive(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	haul := filepath.Join(dir, "haul.tar.zst")
	cut(t, someBytes(100, 9), 100, numberedName(haul), 1)
	if err := os.Symlink(filepath.Join(dir, "gone"), haul+".002"); err != nil {
		t.Fatal(err)
	}
	res := Scan([]string{dir})
	if len(res.Errors) != 1 || !strings.Contains(res.Errors[0].Error(), haul+".002") || !slices.Contains(res.Unreadable, haul) {
		t.Errorf("errors %v, unreadable %v; want an error naming %s.002, and %s unreadable", res.Errors, res.Unreadable, haul, haul)
	}
}
