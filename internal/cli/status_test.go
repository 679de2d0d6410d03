package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/pass"
)

// TestStatusTableSymlinkTarget: a source symlinked into an images dir is
// shown "path -> target" in the table, a plain one as its path.
func TestStatusTableSymlinkTarget(t *testing.T) {
	link, real, plain := "/srv/images/app.tar", "/srv/store/app.tar", "/srv/images/plain.tar"
	st := pass.Status{
		Images: []pass.StatusImage{
			{Name: "example.com/app:1", Sources: []string{link}, Leases: []string{"holdfast/app"}},
			{Name: "example.com/plain:1", Sources: []string{plain}, Leases: []string{"holdfast/plain"}},
		},
		Sources: []pass.StatusSource{
			{Path: link, Lease: "holdfast/app", Identity: "i1", Complete: true, Images: 1, Target: real},
			{Path: plain, Lease: "holdfast/plain", Identity: "i2", Complete: true, Images: 1},
		},
	}
	var tb bytes.Buffer
	if err := writeTable(&tb, st); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tb.String(), link+" -> "+real) {
		t.Errorf("table does not show %s -> %s:\n%s", link, real, tb.String())
	}
	if strings.Contains(tb.String(), plain+" ->") {
		t.Errorf("table shows a target for %s:\n%s", plain, tb.String())
	}
}
