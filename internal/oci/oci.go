// Package oci is the vocabulary of OCI and Docker images that every other
// package speaks: media types and annotations, cosign's tag grammar, the
// graph of an index or a manifest and its children, the platform rule that
// says which of them an image requires, one walk over that graph with
// handlers, and the port through which blobs are read, whose missing blob
// is ErrNotFound. It knows no archive and no content store.
package oci

import (
	"context"
	"errors"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// ErrNotFound is what a record, a lease or a blob that is not there wraps.
var ErrNotFound = errors.New("not found")

// NotFound is err said to be a not-found error: errors.Is(e, ErrNotFound)
// holds, and its message is err's.
func NotFound(err error) error { return notFound{err} }

type notFound struct{ err error }

func (e notFound) Error() string        { return e.err.Error() }
func (e notFound) Unwrap() error        { return e.err }
func (e notFound) Is(target error) bool { return target == ErrNotFound }

// Reader reads small blobs (indexes, manifests, configs, signatures) whole,
// by descriptor. A blob that is not there is an error wrapping ErrNotFound.
type Reader interface {
	ReadBlob(ctx context.Context, desc ocispec.Descriptor) ([]byte, error)
}

// ReaderFunc is a function that reads blobs as a Reader does.
type ReaderFunc func(ctx context.Context, desc ocispec.Descriptor) ([]byte, error)

// ReadBlob calls f.
func (f ReaderFunc) ReadBlob(ctx context.Context, desc ocispec.Descriptor) ([]byte, error) {
	return f(ctx, desc)
}
