package archive

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// reserveStore is a memStore that records what Reserve was told and refuses
// when told more than limit bytes.
type reserveStore struct {
	*memStore
	limit  int64
	calls  int
	blobs  int
	bytes  int64
	putsAt []int // len(puts) at each Reserve call
}

var errTooBig = errors.New("too big")

func (s *reserveStore) Reserve(_ context.Context, blobs int, bytes int64) error {
	s.calls++
	s.blobs += blobs
	s.bytes += bytes
	s.putsAt = append(s.putsAt, len(s.puts))
	if bytes > s.limit {
		return errTooBig
	}
	return nil
}

// TestReserveCountsOnlyMissingBlobs: a walk that defers its writes tells a
// Reserver the blobs it will write and their bytes, leaving out the ones the
// store has, before it writes any; a refusal writes nothing.
func TestReserveCountsOnlyMissingBlobs(t *testing.T) {
	large := randomLayer(int(defaultLimits().docSize)+1000, 1) // above docSize: checked with Has
	small := randomLayer(3000, 2)
	present := randomLayer(5000, 3)
	presentLarge := randomLayer(int(defaultLimits().docSize)+7, 4)
	im := imageWith(t, "amd64", large, small, present, presentLarge)
	index := indexJSON(t, withAnnotations(im.manifest.desc(), annotationContainerdName, "example.com/a:1"))
	archive := tarBytes(t, ociEntries("", index, im.blobs()...))

	newStore := func(limit int64) *reserveStore {
		s := &reserveStore{memStore: newMemStore(), limit: limit}
		s.present[present.digest()] = true
		s.present[presentLarge.digest()] = true
		return s
	}
	want := int64(len(large.data) + len(small.data))

	t.Run("fits", func(t *testing.T) {
		s := newStore(want)
		if _, err := Walk(context.Background(), bytes.NewReader(archive), s); err != nil {
			t.Fatal(err)
		}
		if s.calls != 1 || s.blobs != 2 || s.bytes != want {
			t.Fatalf("Reserve: %d calls, %d blobs, %d bytes; want 1 call, 2 blobs, %d bytes", s.calls, s.blobs, s.bytes, want)
		}
		if s.putsAt[0] != 0 {
			t.Fatalf("%d blobs were written before Reserve", s.putsAt[0])
		}
		if len(s.puts) != 2 || len(s.putPresent) != 0 {
			t.Fatalf("puts %v, puts of present blobs %v; want the 2 missing blobs only", s.puts, s.putPresent)
		}
	})
	t.Run("refused", func(t *testing.T) {
		s := newStore(want - 1)
		_, err := Walk(context.Background(), bytes.NewReader(archive), s)
		if !errors.Is(err, errTooBig) {
			t.Fatalf("walk: %v; want the Reserve error", err)
		}
		if len(s.puts) != 0 {
			t.Fatalf("%d blobs written after a refusal", len(s.puts))
		}
	})
	t.Run("stream", func(t *testing.T) {
		// A compressed archive's blobs are known one at a time: no Reserve.
		s := newStore(0)
		if _, err := Walk(context.Background(), bytes.NewReader(compress(t, Gzip, archive)), s); err != nil {
			t.Fatal(err)
		}
		if s.calls != 0 {
			t.Fatalf("Reserve called %d times on a stream", s.calls)
		}
	})
}
