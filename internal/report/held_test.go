package report

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func digestOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// heldOf is what a node with n images holds: each under its tag and, as
// the CRI records a pulled image, under its repo@digest name.
func heldOf(n int) Held {
	var h Held
	for i := range n {
		repo := fmt.Sprintf("registry.example.com/team-%02d/service-%03d", i%40, i)
		d := digestOf(repo)
		h = append(h, HeldImage{Name: fmt.Sprintf("%s:v1.%d.%d", repo, i%7, i%13), Digest: d, Pinned: i%3 != 0},
			HeldImage{Name: repo + "@" + d, Digest: d, Pinned: i%3 != 0})
	}
	h.Sort()
	return h
}

func TestHeldRoundTrip(t *testing.T) {
	h := heldOf(20)
	got, err := ParseHeld(h.Text())
	if err != nil || !slices.Equal(got, h) {
		t.Fatalf("ParseHeld(Text): %v, %d records, want %d equal", err, len(got), len(h))
	}
	got, err = Unpack(h.Pack())
	if err != nil || !slices.Equal(got, h) {
		t.Fatalf("Unpack(Pack): %v, %d records, want %d equal", err, len(got), len(h))
	}
	if h.Hash() == heldOf(19).Hash() || h.Hash() != heldOf(20).Hash() {
		t.Error("Hash does not follow the contents")
	}
	if got, err := ParseHeld(nil); err != nil || len(got) != 0 {
		t.Errorf("nothing held: %v, %v", got, err)
	}
}

func TestParseHeldNamesTheBadLine(t *testing.T) {
	for _, text := range []string{
		"sha256:abc p a:1\nsha256:abc x b:1\n",
		"sha256:abc p a:1\nmd5:abc p b:1\n",
		"sha256:abc p a:1\nsha256:abc p\n",
	} {
		if _, err := ParseHeld([]byte(text)); err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%q: %v, want an error naming line 2", text, err)
		}
	}
	if _, err := Unpack([]byte("not gzip")); err == nil {
		t.Error("Unpack of what is not gzip: no error")
	}
}

// TestUnpackBounded: a small object that inflates without end is refused,
// not read whole.
func TestUnpackBounded(t *testing.T) {
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	line := []byte("sha256:" + strings.Repeat("0", 64) + " p docker.io/library/a:1\n")
	for written := 0; written <= maxHeldText; written += len(line) * 1024 {
		_, _ = zw.Write(bytes.Repeat(line, 1024))
	}
	_ = zw.Close()
	if _, err := Unpack(b.Bytes()); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("Unpack of %d bytes inflating past the bound: %v", b.Len(), err)
	}
}

// BenchmarkNodeImages: the size of a node's NodeImages object as the
// reporter writes it, for a node holding 500 images (1,000 records: a tag
// and a digest name each) and 20 required images not ready; bytes/object
// × 1,000 nodes is what holdfast check --cluster reads.
func BenchmarkNodeImages(b *testing.B) {
	h := heldOf(500)
	rep := Required{Known: true, Counts: map[State]int{Pinned: 480, Missing: 20}, HeldHash: h.Hash()}
	for i := range 20 {
		rep.NotReady = append(rep.NotReady, Image{Ref: fmt.Sprintf("registry.example.com/team-01/new-%02d:v2.0.0", i),
			UsedBy: []string{fmt.Sprintf("Deployment shop/new-%02d containers/app", i)}, State: Missing})
	}
	var body []byte
	for b.Loop() {
		obj := NodeImages{APIVersion: APIVersion, Kind: Kind, Metadata: ObjectMeta{Name: "node-0001"}, Updated: time.Now(),
			Images: len(h), HeldHash: h.Hash(), Held: h.Pack(), Required: &rep}
		var err error
		if body, err = json.Marshal(obj); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(body)), "bytes/object")
	b.ReportMetric(float64(len(h.Text())), "text-bytes")
}
