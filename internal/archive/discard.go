package archive

import (
	"context"
	"fmt"
	"io"

	"github.com/opencontainers/go-digest"
)

// Discard is a Store that keeps nothing: it has no blob, and Put reads each
// blob through, checks its size and digest, and forgets it. A walk into it
// checks an archive whole and keeps only what Result holds: the documents,
// and the digests and sizes of the other blobs (holdfast verify).
var Discard Store = discard{}

type discard struct{}

func (discard) Has(context.Context, digest.Digest) (bool, error) { return false, nil }

func (discard) Put(ctx context.Context, expected digest.Digest, size int64, r io.Reader) (digest.Digest, error) {
	alg := digest.Canonical
	if expected != "" {
		if err := expected.Validate(); err != nil {
			return "", err
		}
		alg = expected.Algorithm()
	}
	dg := alg.Digester()
	n, err := io.Copy(dg.Hash(), io.LimitReader(&ctxReader{ctx: ctx, r: r}, size+1))
	if err != nil {
		return "", err
	}
	if n != size {
		return "", fmt.Errorf("%d bytes, expected %d", n, size)
	}
	got := dg.Digest()
	if expected != "" && got != expected {
		return "", fmt.Errorf("content has digest %s, expected %s", got, expected)
	}
	return got, nil
}
