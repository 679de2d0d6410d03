package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
)

// The walk of a compressed archive runs the decoder in a goroutine of its own
// (aheadReader) while the store hashes and writes. These tests break the
// stream, the store or the context in the middle of a blob: the walk must
// fail with the cause, keep nothing of the blob, and leave no goroutine
// behind. They are not parallel: they count the process's goroutines.

// streamArchive is an OCI layout tar of one image whose layer is random bytes
// of n bytes (larger than smallLimits' documents, so it is written to the
// store as the walk reads it), compressed with c.
func streamArchive(t *testing.T, c Compression, n int) (archive []byte, layer blob) {
	t.Helper()
	layer = randomLayer(n, 11)
	im := imageWith(t, "amd64", layer)
	es := ociEntries("", indexJSON(t, withAnnotations(im.manifest.desc(), annotationContainerdName, "a:1")), im.blobs()...)
	return compress(t, c, tarBytes(t, es)), layer
}

// walkGoroutines lists the goroutines of a walk still running: the read-ahead
// and anything of the decoders.
func walkGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var left []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "(*aheadReader).fill") || strings.Contains(g, "klauspost/compress") {
			left = append(left, g)
		}
	}
	return left
}

// checkNoLeak fails the test if goroutines of the walk are left, or if the
// process has more goroutines than before it, once they have had a few
// seconds to finish (they should have finished already: Walk waits for the
// read-ahead, and the decoders hold none).
func checkNoLeak(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := walkGoroutines()
		n := runtime.NumGoroutine()
		if len(left) == 0 && n <= before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after the walk, %d before; of the walk's:\n%s", n, before, strings.Join(left, "\n\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A stream cut in the middle of a blob's bytes fails with the decoder's
// "unexpected EOF", names the blob, and the store keeps nothing of it.
func TestWalkStreamTruncatedMidBlob(t *testing.T) {
	for _, c := range []Compression{Zstd, Gzip, None} {
		t.Run(string(c), func(t *testing.T) {
			before := runtime.NumGoroutine()
			z, layer := streamArchive(t, c, 3*aheadBlockSize+12345)
			for _, frac := range []float64{0.3, 0.5, 0.9} {
				st := newMemStore()
				cut := z[:int(float64(len(z))*frac)]
				_, err := walk(t.Context(), struct{ io.Reader }{bytes.NewReader(cut)}, st, WalkOptions{}, smallLimits())
				if err == nil || !strings.Contains(err.Error(), "unexpected EOF") {
					t.Errorf("cut at %.0f%%: error %v, want unexpected EOF", frac*100, err)
				}
				if c != None && !strings.HasPrefix(err.Error(), string(c)+": ") {
					t.Errorf("cut at %.0f%%: error %q does not name %s", frac*100, err, c)
				}
				if c == None && !strings.Contains(err.Error(), layer.digest().Encoded()) {
					t.Errorf("cut at %.0f%%: error %q does not name the layer", frac*100, err)
				}
				if _, ok := st.blobs[layer.digest()]; ok {
					t.Errorf("cut at %.0f%%: the store kept the cut layer", frac*100)
				}
			}
			checkNoLeak(t, before)
		})
	}
}

// A corrupt zstd block in the middle of a blob fails the walk with the
// decoder's error; the store keeps nothing of the blob.
func TestWalkStreamCorruptFrame(t *testing.T) {
	before := runtime.NumGoroutine()
	z, layer := streamArchive(t, Zstd, 3*aheadBlockSize)
	for _, at := range []int{len(z) / 3, len(z) / 2, len(z) * 4 / 5} {
		bad := bytes.Clone(z)
		for i := at; i < at+64; i++ {
			bad[i] ^= 0x5a
		}
		st := newMemStore()
		_, err := walk(t.Context(), struct{ io.Reader }{bytes.NewReader(bad)}, st, WalkOptions{}, smallLimits())
		if err == nil || !strings.HasPrefix(err.Error(), "zstd: ") {
			t.Errorf("corrupt at %d of %d: error %v, want the decoder's", at, len(z), err)
		}
		if _, ok := st.blobs[layer.digest()]; ok {
			t.Errorf("corrupt at %d: the store kept the layer", at)
		}
	}
	checkNoLeak(t, before)
}

// stopStore reads half of each blob, then calls stop (cancelling the walk's
// context, say) or fails, and reads on while it can.
type stopStore struct {
	*memStore
	stop func()
	fail error
}

func (s *stopStore) Put(ctx context.Context, expected digest.Digest, size int64, r io.Reader) (digest.Digest, error) {
	if _, err := io.CopyN(io.Discard, r, size/2); err != nil {
		return "", err
	}
	if s.fail != nil {
		return "", s.fail
	}
	s.stop()
	if _, err := io.Copy(io.Discard, &ctxReader{ctx: ctx, r: r}); err != nil {
		return "", err
	}
	return "", errors.New("read the whole blob after the context was cancelled")
}

// The context cancelled, or the store failing, in the middle of a blob while
// the decoder is ahead of it: the walk returns that error at once, and its
// read-ahead and decoder are gone when it returns.
func TestWalkStreamStopsMidBlob(t *testing.T) {
	disk := errors.New("disk full")
	for _, c := range []Compression{Zstd, Gzip} {
		for _, fail := range []error{nil, disk} {
			t.Run(fmt.Sprintf("%s/%v", c, fail), func(t *testing.T) {
				z, _ := streamArchive(t, c, 8*aheadBlockSize)
				before := runtime.NumGoroutine()
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				st := &stopStore{memStore: newMemStore(), stop: cancel, fail: fail}
				_, err := walk(ctx, struct{ io.Reader }{bytes.NewReader(z)}, st, WalkOptions{}, smallLimits())
				want := context.Canceled
				if fail != nil {
					want = fail
				}
				if !errors.Is(err, want) {
					t.Errorf("error %v, want %v", err, want)
				}
				checkNoLeak(t, before)
			})
		}
	}
}
