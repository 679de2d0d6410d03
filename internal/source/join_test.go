package source

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/archive"
	"github.com/holdfast-project/holdfast/internal/fixture"
)

// memStore is an archive.Store in memory.
type memStore struct {
	mu    sync.Mutex
	blobs map[digest.Digest]bool
}

func (s *memStore) Has(context.Context, digest.Digest) (bool, error) { return false, nil }

func (s *memStore) Put(_ context.Context, expected digest.Digest, _ int64, r io.Reader) (digest.Digest, error) {
	d, err := digest.FromReader(r)
	if err != nil {
		return "", err
	}
	if expected != "" && d != expected {
		return "", fmt.Errorf("blob %s has digest %s", expected, d)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.blobs[d] = true
	return d, nil
}

// TestWalkReadsZarfSetToItsEnd: the import's walk of a Zarf set reads the
// joined stream to its end, plain tar or .tar.zst, so a set whose bytes are
// not what its part000 says fails the walk itself, naming the bundle; one
// that is ends in a walk and a Close without error (Close would say the sum
// was not checked had the walk stopped short).
func TestWalkReadsZarfSetToItsEnd(t *testing.T) {
	t.Parallel()
	// Larger than what the walk peeks at and reads ahead (64 KiB, 4 MiB), so
	// that the end of the stream is met at the end of the walk.
	img, err := fixture.Build(context.Background(), fixture.ImageSpec{Names: []string{"example.com/split/app:1"},
		Layers: fixture.UniformLayers(2, 3<<20, false, 9)})
	if err != nil {
		t.Fatal(err)
	}
	var tarball bytes.Buffer
	if err := fixture.WriteOCI(context.Background(), &tarball, fixture.OCIOptions{Names: fixture.NameContainerd}, img); err != nil {
		t.Fatal(err)
	}
	for _, c := range []fixture.Compression{fixture.None, fixture.Zstd} {
		data, err := fixture.CompressBytes(c, fixture.CompressOptions{}, tarball.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		for _, good := range []bool{true, false} {
			src := zarfSource(t, data, 1<<20, func(m *zarfMeta) {
				if !good {
					m.Sha256Sum = fmt.Sprintf("%x", sha256.Sum256([]byte("another package")))
				}
			})
			r, err := OpenSource(src)
			if err != nil {
				t.Fatal(err)
			}
			res, werr := archive.Walk(context.Background(), r, &memStore{blobs: map[digest.Digest]bool{}})
			cerr := r.Close()
			switch {
			case good && (werr != nil || cerr != nil || len(res.Images) != 1):
				t.Errorf("%s, sum right: walk %v, close %v; want the image, no error", c, werr, cerr)
			case !good && (werr == nil || !strings.Contains(werr.Error(), "zarf-package-app-amd64.tar.zst: its parts join to sha256")):
				t.Errorf("%s, sum wrong: the walk ended with %v; want the mismatch, naming the bundle", c, werr)
			}
		}
	}
}
