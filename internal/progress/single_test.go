package progress

import (
	"io"
	"os"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// TestSingleCountsEveryBlob: export's one line counts the bytes of every
// blob read through it, and a nil line passes the blob through.
func TestSingleCountsEveryBlob(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	d := New(pw, "always", false, NewLog(pw))
	d.Start()
	line := d.Single("out.tar.zst", 10)
	for _, blob := range []string{"0123", "456789"} {
		r := line.Read(ocispec.Descriptor{}, io.NopCloser(strings.NewReader(blob)))
		if _, err := io.Copy(io.Discard, r); err != nil {
			t.Fatal(err)
		}
		r.Close()
	}
	line.Close()
	d.Stop()
	pw.Close()
	out, err := io.ReadAll(pr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "out.tar.zst") || !strings.Contains(string(out), "10.0 b / 10.0 b") {
		t.Errorf("the export's line wrote %q, want out.tar.zst with 10 bytes of 10", out)
	}

	var none *Single
	r := none.Read(ocispec.Descriptor{}, io.NopCloser(strings.NewReader("blob")))
	if b, _ := io.ReadAll(r); string(b) != "blob" {
		t.Errorf("a nil line read %q, want the blob", b)
	}
	none.Close()
}
