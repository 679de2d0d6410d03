package containerd

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/files"
)

// stateCache keeps copies of the leases' state blobs in a directory of the
// data dir, named by digest, so that a pass reads them from disk instead of
// asking containerd for each. The store stays the truth: a copy is used only
// for the digest the store's walk names, and only if its bytes have that
// digest. Losing the directory costs one read per lease, nothing else.
type stateCache struct{ dir string }

func (c stateCache) path(d digest.Digest) string {
	return filepath.Join(c.dir, d.Algorithm().String()+"-"+d.Encoded())
}

// get returns the copy of blob d, or nil.
func (c stateCache) get(d digest.Digest) []byte {
	if c.dir == "" || d.Validate() != nil {
		return nil
	}
	data, err := os.ReadFile(c.path(d))
	if err != nil || d.Algorithm().FromBytes(data) != d {
		return nil
	}
	return data
}

// put saves a copy of blob d, best effort: a copy is never needed.
func (c stateCache) put(d digest.Digest, data []byte) {
	if c.dir == "" || d.Validate() != nil || os.MkdirAll(c.dir, 0o700) != nil {
		return
	}
	_ = files.ReplaceFile(c.path(d), data, 0o600)
}

// prune removes the copies of blobs that are not in keep.
func (c stateCache) prune(keep map[digest.Digest]bool) {
	if c.dir == "" {
		return
	}
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		alg, hex, ok := strings.Cut(e.Name(), "-")
		if ok && keep[digest.NewDigestFromEncoded(digest.Algorithm(alg), hex)] {
			continue
		}
		_ = os.Remove(filepath.Join(c.dir, e.Name()))
	}
}
