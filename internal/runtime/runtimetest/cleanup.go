package runtimetest

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

// cleanupSparesLiveImport: another holdfast's Cleanup while an import is
// half-way through a blob leaves that import's ingests alone: the import
// goes on, and its source is complete and intact.
func cleanupSparesLiveImport(t *testing.T, s Store, name string) {
	ctx := context.Background()
	// An archive's names are references: lower case.
	img, err := fixture.Build(ctx, fixture.ImageSpec{Names: []string{strings.ToLower(name)}, Layers: fixture.UniformLayers(1, 8<<20, false, 31)})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := fixture.WriteOCI(ctx, &buf, fixture.OCIOptions{Names: fixture.NameContainerd}, img); err != nil {
		t.Fatal(err)
	}
	gate := &heldReader{data: buf.Bytes(), at: buf.Len() / 2, held: make(chan struct{}), release: make(chan struct{})}
	defer gate.let()
	type outcome struct {
		res runtime.ImportResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		req := runtime.ImportRequest{Source: sourcePath(name, ".tar"), Identity: "id-1", Open: func() (io.ReadCloser, error) { return gate, nil }}
		res, err := s.Import(ctx, s.Runtime.ImportStore(), req)
		done <- outcome{res, err}
	}()
	select {
	case <-gate.held:
	case o := <-done:
		t.Fatalf("the import ended (%+v, %v) before it was half-way", o.res, o.err)
	case <-time.After(time.Minute):
		t.Fatal("the import never read half its archive")
	}

	var live []string
	if s.Can.Ingests {
		deadline := time.Now().Add(10 * time.Second)
		for live = s.Ingests(t); len(live) == 0 && time.Now().Before(deadline); live = s.Ingests(t) {
			time.Sleep(10 * time.Millisecond)
		}
		if len(live) == 0 {
			t.Fatal("no ingest open while the import is half-way through its layer")
		}
	} else {
		t.Log("the store keeps no ingests (Capabilities.Ingests false): Cleanup has none to spare; the import is checked to go on")
	}
	if err := s.Another(t).Cleanup(ctx); err != nil {
		t.Errorf("another holdfast's cleanup: %v", err)
	}
	if s.Can.Ingests {
		if now := s.Ingests(t); !containsAll(now, live) {
			t.Errorf("the live import's ingests %v are not all there after another holdfast's cleanup: %v", live, now)
		}
	}
	gate.let()
	o := <-done
	if o.err != nil {
		t.Fatalf("the import after another holdfast's cleanup: %v", o.err)
	}
	t.Cleanup(func() { _ = s.Runtime.Release(ctx, o.res.Lease) })
	if st, ok := stateOf(t, s.Runtime, o.res.Lease); !ok || !st.Complete || !st.Intact {
		t.Errorf("after the import, Sources reports %+v (found %v); want it complete and intact", st, ok)
	}
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// heldReader serves data, and stops at offset at until let: an archive
// whose reading is half-way.
type heldReader struct {
	data    []byte
	off     int
	at      int
	held    chan struct{}
	release chan struct{}
	once    sync.Once
	letOnce sync.Once
}

func (r *heldReader) Read(p []byte) (int, error) {
	if r.off >= len(r.data) {
		return 0, io.EOF
	}
	if r.off >= r.at {
		r.once.Do(func() { close(r.held) })
		<-r.release
	}
	end := len(r.data)
	if r.off < r.at {
		end = r.at
	}
	n := copy(p, r.data[r.off:end])
	r.off += n
	return n, nil
}

func (r *heldReader) Close() error { return nil }

func (r *heldReader) let() { r.letOnce.Do(func() { close(r.release) }) }
