package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
)

// blockingStore fails the Put of one blob once `others` other Put calls are
// under way, and holds those until their context is cancelled.
type blockingStore struct {
	*memStore
	fail   digest.Digest
	others int

	started   atomic.Int32 // Put calls
	active    atomic.Int32 // Put calls not yet returned
	late      atomic.Int32 // Put calls that began with their context done
	cancelled atomic.Int32 // held Put calls that saw their context cancelled
	held      chan struct{}
}

func (s *blockingStore) Put(ctx context.Context, d digest.Digest, size int64, r io.Reader) (digest.Digest, error) {
	s.started.Add(1)
	s.active.Add(1)
	defer s.active.Add(-1)
	if ctx.Err() != nil {
		s.late.Add(1)
	}
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	if d == s.fail {
		for range s.others {
			select {
			case <-s.held:
			case <-timeout.C:
				return "", errors.New("the other writes did not start")
			}
		}
		return "", errors.New("disk full")
	}
	s.held <- struct{}{}
	select {
	case <-ctx.Done():
		s.cancelled.Add(1)
		return "", ctx.Err()
	case <-timeout.C:
		return "", errors.New("not cancelled")
	}
}

// TestWalkConcurrentPutError: a Put that fails in one writer cancels the
// writes under way in the others, no write starts after it, and Walk returns
// that error once every Put has returned.
func TestWalkConcurrentPutError(t *testing.T) {
	t.Parallel()
	var layers []blob
	for i := range 6 {
		layers = append(layers, randomLayer(64<<10+i<<10, uint64(10+i))) // larger than smallLimits' documents
	}
	im := imageWith(t, "amd64", layers...)
	archive := tarBytes(t, ociEntries("", indexJSON(t, withAnnotations(im.manifest.desc(), annotationContainerdName, "a:1")), im.blobs()...))
	// Largest first: the writers take layers 5, 4, 3, 2; layer 3 fails.
	failing := layers[3]
	st := &blockingStore{memStore: newMemStore(), fail: failing.digest(), others: 3, held: make(chan struct{}, 8)}
	_, err := walk(t.Context(), bytes.NewReader(archive), st, WalkOptions{Concurrency: 4}, smallLimits())
	want := "writing blobs/sha256/" + failing.digest().Encoded() + ": disk full"
	if err == nil || err.Error() != want {
		t.Fatalf("error %v, want %s", err, want)
	}
	if n := st.active.Load(); n != 0 {
		t.Errorf("%d Put calls still running after Walk returned", n)
	}
	if n := st.cancelled.Load(); n != 3 {
		t.Errorf("%d held Put calls saw their context cancelled, want 3", n)
	}
	if n, late := st.started.Load(), st.late.Load(); n != 4 || late != 0 {
		t.Errorf("%d Put calls (%d after the error), want 4, none after it", n, late)
	}
}

// TestWalkSeekableFile: an *os.File read from an offset (what comes before is
// not the archive's) is walked by the writers, from the right offsets.
func TestWalkSeekableFile(t *testing.T) {
	t.Parallel()
	im := imageWith(t, "amd64", randomLayer(64<<10, 1), randomLayer(96<<10, 2), randomLayer(3<<10, 3))
	archive := tarBytes(t, ociEntries("./", indexJSON(t, withAnnotations(im.manifest.desc(), annotationContainerdName, "a:1")), im.blobs()...))
	prefix := []byte(strings.Repeat("not the archive\n", 100))
	name := filepath.Join(t.TempDir(), "a.tar")
	if err := os.WriteFile(name, append(prefix, archive...), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, conc := range []int{1, 4} {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Seek(int64(len(prefix)), io.SeekStart); err != nil {
			t.Fatal(err)
		}
		var wait time.Duration // one by one, Put calls must not wait for each other
		if conc > 1 {
			wait = 10 * time.Second
		}
		st := newOverlapStore(wait)
		res, err := walk(t.Context(), f, st, WalkOptions{Concurrency: conc}, smallLimits())
		f.Close()
		if err != nil {
			t.Fatalf("concurrency %d: %v", conc, err)
		}
		checkResult(t, res, archive, None, st.memStore, want{
			format: FormatOCI,
			images: map[string]digest.Digest{"docker.io/library/a:1": im.manifest.digest()},
			docs:   digests(im.manifest, im.config),
			blobs:  digests(im.layers...),
		})
		if st.overlapped() != (conc > 1) {
			t.Errorf("concurrency %d: Put calls overlapped: %v", conc, st.overlapped())
		}
	}
}

// TestWalkDirConcurrent: a layout directory gives the same result, bytes
// read included, whether its blobs are written one by one or concurrently.
func TestWalkDirConcurrent(t *testing.T) {
	t.Parallel()
	present := randomLayer(80<<10, 4)
	small := makeImage(t, "amd64", Gzip, "etc/small").layers[0] // below smallLimits' documents
	im := imageWith(t, "amd64", randomLayer(64<<10, 1), randomLayer(96<<10, 2), present, small)
	dir := t.TempDir()
	writeLayout(t, dir, indexJSON(t, withAnnotations(im.manifest.desc(), annotationContainerdName, "a:1")), im.blobs()...)

	seqStore := newMemStore()
	seqStore.present[present.digest()] = true
	seq, err := walkDir(t.Context(), dir, seqStore, WalkOptions{Concurrency: 1}, smallLimits())
	if err != nil {
		t.Fatal(err)
	}
	st := newOverlapStore(10 * time.Second)
	st.present[present.digest()] = true
	res, err := walkDir(t.Context(), dir, st, WalkOptions{Concurrency: 3}, smallLimits())
	if err != nil {
		t.Fatal(err)
	}
	sameResult(t, seq, res)
	checkResult(t, res, nil, None, st.memStore, want{
		format: FormatOCI,
		images: map[string]digest.Digest{"docker.io/library/a:1": im.manifest.digest()},
		docs:   digests(im.manifest, im.config),
		blobs:  digests(im.layers...),
	})
	if !st.overlapped() {
		t.Error("no two Put calls ran at once")
	}
	if got, want := slices.Sorted(slices.Values(st.puts)), slices.Sorted(slices.Values(seqStore.puts)); !slices.Equal(got, want) || len(got) != 3 {
		t.Errorf("Put calls %v, one by one %v", got, want)
	}
	if st.hasN != seqStore.hasN {
		t.Errorf("%d Has calls, one by one %d", st.hasN, seqStore.hasN)
	}
}

// TestWalkDockerSaveOnePool: the small layers a docker save archive holds in
// memory are written by the same writers as its large ones, at once.
func TestWalkDockerSaveOnePool(t *testing.T) {
	t.Parallel()
	large := randomLayer(9<<20, 5) // over the 8 MiB document threshold
	im := imageWith(t, "amd64", large, makeImage(t, "amd64", None, "etc/small").layers[0])
	for _, entries := range [][]entry{
		dockerSaveEntries(t, false, []image{im}, [][]string{{"a:1"}}),
		ggcrEntries(t, im, "a:1"),
	} {
		archive := tarBytes(t, entries)
		res, st := walkConcurrently(t, archive)
		checkResult(t, res, archive, None, st, want{
			format: FormatDockerSave,
			images: map[string]digest.Digest{"docker.io/library/a:1": im.manifest.digest()},
			blobs:  digests(im.layers...),
		})
	}
}

// fsyncStore does what the content store does with each blob: sha256 of the
// bytes, written to a file (1 MiB − 4 KiB at a time, as the ingester writes),
// fsync, close. It keeps nothing.
type fsyncStore struct{ dir string }

func (fsyncStore) Has(context.Context, digest.Digest) (bool, error) { return false, nil }

func (s fsyncStore) Put(_ context.Context, expected digest.Digest, size int64, r io.Reader) (digest.Digest, error) {
	f, err := os.CreateTemp(s.dir, "blob-")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	dg := digest.Canonical.Digester()
	buf := make([]byte, 1<<20-4<<10)
	n, err := io.CopyBuffer(struct{ io.Writer }{io.MultiWriter(f, dg.Hash())}, struct{ io.Reader }{r}, buf)
	if err != nil {
		return "", err
	}
	if n != size {
		return "", errors.New("short blob")
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	if expected != "" && dg.Digest() != expected {
		return "", errors.New("digest mismatch")
	}
	return dg.Digest(), nil
}

// BenchmarkWalkSeekable walks a plain OCI tar of 4 × 32 MiB incompressible
// layers from a file into fsyncStore, writing one blob at a time (the single
// streaming pass) or several at once.
func BenchmarkWalkSeekable(b *testing.B) {
	dir := b.TempDir()
	name := filepath.Join(dir, "archive.tar")
	if err := os.WriteFile(name, benchArchive(b, 4, 32<<20), 0o644); err != nil {
		b.Fatal(err)
	}
	st, err := os.Stat(name)
	if err != nil {
		b.Fatal(err)
	}
	blobs := b.TempDir()
	for _, conc := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			b.SetBytes(st.Size())
			for b.Loop() {
				f, err := os.Open(name)
				if err != nil {
					b.Fatal(err)
				}
				_, err = WalkWith(b.Context(), f, fsyncStore{blobs}, WalkOptions{Concurrency: conc})
				f.Close()
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestWalkTruncatedBlobNamed: an archive cut inside a blob's data fails with
// an error that names the blob, whether the blob is written as the pass meets
// it or seeked past and written later.
func TestWalkTruncatedBlobNamed(t *testing.T) {
	t.Parallel()
	layer := randomLayer(64<<10, 6) // larger than smallLimits' documents
	im := imageWith(t, "amd64", layer)
	es := ociEntries("", indexJSON(t, withAnnotations(im.manifest.desc(), annotationContainerdName, "a:1")), im.blobs()...)
	var at int
	for i, e := range es {
		if e.name == "blobs/sha256/"+layer.digest().Encoded() {
			// 100 bytes before the end of its data (64 KiB: no padding).
			at = len(tarBytes(t, es[:i+1])) - 1024 - 100
		}
	}
	archive := tarBytes(t, es)[:at]
	for _, tc := range []struct {
		name string
		in   io.Reader
		conc int
	}{
		{"seekable", bytes.NewReader(archive), 4},
		{"seekable-seq", bytes.NewReader(archive), 1},
		{"stream", struct{ io.Reader }{bytes.NewReader(archive)}, 4},
	} {
		_, err := walk(t.Context(), tc.in, newMemStore(), WalkOptions{Concurrency: tc.conc}, smallLimits())
		if err == nil || !strings.Contains(err.Error(), "blobs/sha256/"+layer.digest().Encoded()+": ") || !strings.Contains(err.Error(), "unexpected EOF") {
			t.Errorf("%s: error %v, want one naming the layer, unexpected EOF", tc.name, err)
		}
	}
}
