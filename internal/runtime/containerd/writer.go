package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"

	contentapi "github.com/containerd/containerd/api/services/content/v1"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// blobWriter writes one blob through the content service's Write stream
// without waiting for each write's answer. containerd answers every message
// of the stream; the client's own writer waits for each answer before it
// sends the next message, so the store's reading, hashing and writing of one
// chunk never overlap the sending of the next, and a single stream (any
// compressed archive) keeps containerd less than one core busy. Here the
// answers are read by a goroutine; gRPC's flow control bounds what is in
// flight, and Commit waits for the last answer.
type blobWriter struct {
	stream contentapi.Content_WriteClient
	ref    string
	offset int64 // where the next write goes
	// answers closes once the stream has ended; then last and err are set.
	answers chan struct{}
	last    *contentapi.WriteContentResponse
	err     error
}

// openBlob starts an ingest of desc under ref (with the lease and namespace of
// ctx). It returns the writer and the bytes the ingest already holds. A blob
// the store has already is errdefs.ErrAlreadyExists.
func (r *Runtime) openBlob(ctx context.Context, ref string, desc ocispec.Descriptor) (*blobWriter, int64, error) {
	stream, err := r.content.Write(ctx)
	if err != nil {
		return nil, 0, errgrpc.ToNative(err)
	}
	err = stream.Send(&contentapi.WriteContentRequest{
		Action:   contentapi.WriteAction_STAT,
		Ref:      ref,
		Total:    desc.Size,
		Expected: desc.Digest.String(),
	})
	var st *contentapi.WriteContentResponse
	if err == nil {
		st, err = stream.Recv()
	}
	if err != nil {
		_ = stream.CloseSend()
		return nil, 0, errgrpc.ToNative(err)
	}
	w := &blobWriter{stream: stream, ref: ref, offset: st.Offset, answers: make(chan struct{})}
	go w.readAnswers()
	return w, st.Offset, nil
}

func (w *blobWriter) readAnswers() {
	defer close(w.answers)
	for {
		resp, err := w.stream.Recv()
		if err == io.EOF {
			return
		}
		if err != nil {
			w.err = errgrpc.ToNative(err)
			return
		}
		w.last = resp
	}
}

// restart makes the next write go to offset 0: the store truncates the ingest.
func (w *blobWriter) restart() { w.offset = 0 }

// Write sends p as one message. An error the store answered with earlier is
// returned by a later Write or by Commit.
func (w *blobWriter) Write(p []byte) (int, error) {
	select {
	case <-w.answers:
		return 0, w.failed("writing")
	default:
	}
	if err := w.stream.Send(&contentapi.WriteContentRequest{
		Action: contentapi.WriteAction_WRITE,
		Ref:    w.ref,
		Offset: w.offset,
		Data:   p,
	}); err != nil {
		if err == io.EOF { // the stream ended: its status says why
			<-w.answers
			return 0, w.failed("writing")
		}
		return 0, errgrpc.ToNative(err)
	}
	w.offset += int64(len(p))
	return len(p), nil
}

// Commit asks the store to commit the blob at size with digest expected, and
// waits for its answer to every message.
func (w *blobWriter) Commit(size int64, expected digest.Digest, labels map[string]string) error {
	err := w.stream.Send(&contentapi.WriteContentRequest{
		Action:   contentapi.WriteAction_COMMIT,
		Ref:      w.ref,
		Offset:   w.offset,
		Total:    size,
		Expected: expected.String(),
		Labels:   labels,
	})
	if err != nil && err != io.EOF {
		return errgrpc.ToNative(err)
	}
	_ = w.stream.CloseSend()
	<-w.answers
	if w.err != nil {
		return w.err
	}
	if w.last == nil || w.last.Action != contentapi.WriteAction_COMMIT {
		return errors.New("the store ended the write without committing")
	}
	if w.last.Offset != size {
		return fmt.Errorf("the store committed %d bytes, want %d", w.last.Offset, size)
	}
	if got := digest.Digest(w.last.Digest); got != expected {
		return fmt.Errorf("the store committed digest %s, want %s", got, expected)
	}
	return nil
}

// Close ends the stream; an ingest not committed stays for Abort.
func (w *blobWriter) Close() {
	_ = w.stream.CloseSend()
}

func (w *blobWriter) failed(doing string) error {
	if w.err != nil {
		return w.err
	}
	return fmt.Errorf("%s: the store ended the write stream", doing)
}
