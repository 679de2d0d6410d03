package pass

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/importer"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
)

// StreamName is how errors name an archive read from standard input.
const StreamName = "standard input"

// streamMark leads the name of a kept source read from standard input:
// stdin@sha256:<the first 12 hex digits of the stream's digest>. No path is
// such a name (a kept file's path is absolute), and no two streams of other
// bytes share one but by a collision of 48 bits.
const streamMark = "stdin@"

// maxStreamTail bounds the bytes of a stream after the end of its archive
// that are read to identify it (the archive's own padding and trailers are
// read by the walk): a stream that goes on is refused, not read for ever.
const maxStreamTail = 16 << 20

// streamCleanup bounds the clean-up of a failed stream import.
const streamCleanup = 30 * time.Second

// StreamSource is the name of the kept source a stream of digest d is.
func StreamSource(d digest.Digest) string {
	return streamMark + d.Algorithm().String() + ":" + d.Encoded()[:12]
}

// KeepStream imports the archive r streams (standard input: holdfast import -)
// as a kept source, as Keep imports a file. Its identity is the digest of
// the bytes read, known only at the end: the import is written under a lease
// of its own, and once the stream is read whole what that lease holds goes
// onto the kept source's lease, named by the digest (StreamSource), which
// then gets the import's state; the first lease is deleted. A stream of the
// same bytes again is the same kept source, unchanged; streams of other bytes
// are other kept sources and replace none. A failed or cut stream leaves
// nothing, as a failed file import. Nothing but the archive's bytes is
// spooled to disk.
func KeepStream(ctx context.Context, rt hfruntime.Backend, r io.Reader, standing Standing, opts KeepOptions) (Kept, error) {
	k := Kept{Path: StreamName}
	started := time.Now()
	in := &hashedReader{r: r, h: digest.Canonical.Hash()}
	opened := false
	store := &recordingStore{Store: rt.ImportStore(), held: map[digest.Digest]bool{}}
	req := hfruntime.ImportRequest{
		// While it is read, the stream is a kept import in flight: a pass
		// leaves its lease alone until it is KeptStaleAge old.
		Source:   streamMark + "reading",
		Identity: "reading:" + randomHex(8),
		MtimeNs:  started.UnixNano(),
		Kept:     true,
		Signed:   opts.Policy != nil,
		Name:     opts.Name,
		Open: func() (io.ReadCloser, error) {
			if opened {
				return nil, errors.New("a stream is read once")
			}
			opened = true
			var rc io.ReadCloser = io.NopCloser(in)
			if opts.Progress != nil {
				rc = opts.Progress(StreamName, 0, rc)
			}
			return rc, nil
		},
	}
	reading := hfruntime.KeptLeaseID(req.Source, req.Identity)
	res, err := importer.Import(ctx, store, req)
	if err == nil {
		err = in.drain()
	}
	if err == nil && store.state == nil {
		err = errors.New("the import recorded no state")
	}
	if err != nil {
		cleanup(ctx, store, reading, "")
		return k, fmt.Errorf("import %s: %w", StreamName, err)
	}
	sum := digest.NewDigest(digest.Canonical, in.h)
	identity := sum.String()
	if opts.Name != "" {
		identity += ",name=" + opts.Name
	}
	k.Path = StreamSource(sum)
	st := *store.state
	st.Source, st.Identity, st.MtimeNs = k.Path, identity, started.UnixNano()
	final, unchanged, made, err := moveStream(ctx, store, st, opts.Policy != nil)
	if err != nil {
		cleanup(ctx, store, reading, made)
		return k, fmt.Errorf("import %s (%s): %w", StreamName, k.Path, err)
	}
	cleanup(ctx, store, reading, "")
	res.Lease, res.Unchanged = final.Lease, unchanged
	res.Images, res.State = final.Images, final
	k.Result = res
	err = pinKept(ctx, rt, &k, "", standing, opts)
	return k, err
}

// moveStream puts what the stream's import leased onto the kept source's
// lease of st (its source and identity), and records st there. A complete,
// intact import there already (the same bytes streamed before) is left as it
// is: unchanged. made is the lease when this call created it.
func moveStream(ctx context.Context, store *recordingStore, st hfruntime.SourceState, signed bool) (_ hfruntime.SourceState, unchanged bool, made string, _ error) {
	st.Lease = hfruntime.KeptLeaseID(st.Source, st.Identity)
	prior, err := store.ReadState(ctx, st.Lease)
	switch {
	case errors.Is(err, hfruntime.ErrNotFound):
		made = st.Lease
	case err != nil:
		return st, false, "", err
	case prior.Complete && (prior.SignaturesRecorded || !signed):
		if ok, err := store.Intact(ctx, prior); err != nil || ok {
			return prior, ok, "", err
		}
	}
	if err := store.CreateLease(ctx, st.Lease, map[string]string{
		hfruntime.LabelSource:     hfruntime.TruncateLabel(hfruntime.StoredSource(st.Source, true)),
		hfruntime.LabelIdentity:   hfruntime.TruncateLabel(st.Identity),
		hfruntime.LabelKept:       "true",
		hfruntime.LabelImportedAt: time.Now().UTC().Format(time.RFC3339),
	}); err != nil {
		return st, false, made, err
	}
	if err := store.Store.AddToLease(ctx, st.Lease, store.leased()); err != nil {
		return st, false, made, err
	}
	sink := store.Store.NewSink(st.Lease, st.Source)
	defer sink.Close(ctx)
	if err := sink.WriteState(ctx, st); err != nil {
		return st, false, made, err
	}
	st.Complete, st.Intact, st.CreatedAt = true, true, time.Now()
	return st, false, "", nil
}

// cleanup deletes the lease the stream was read under and, if set, the kept
// source's lease a failed move made.
func cleanup(ctx context.Context, store *recordingStore, reading, made string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), streamCleanup)
	defer cancel()
	if made != "" {
		_ = store.DeleteLease(ctx, made)
	}
	_ = store.DeleteLease(ctx, reading)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// hashedReader hashes what is read through it.
type hashedReader struct {
	r io.Reader
	h hash.Hash
}

func (h *hashedReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	return n, err
}

// drain reads what follows the archive in the stream, so that the digest is
// that of every byte, up to maxStreamTail.
func (h *hashedReader) drain() error {
	n, err := io.Copy(io.Discard, io.LimitReader(h, maxStreamTail+1))
	if err != nil {
		return fmt.Errorf("reading past the end of the archive: %w", err)
	}
	if n > maxStreamTail {
		return fmt.Errorf("more than %d MiB follow the end of the archive", maxStreamTail>>20)
	}
	return nil
}
