package agent

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
)

// TestImportRefusesSwappedFIFO: an archive replaced by a named pipe between
// the scan and the import fails that import instead of hanging the pass.
func TestImportRefusesSwappedFIFO(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	archive := filepath.Join(dir, "a.tar")
	tarHeader := make([]byte, 512)
	copy(tarHeader[257:], "ustar")
	if err := os.WriteFile(archive, tarHeader, 0o644); err != nil {
		t.Fatal(err)
	}
	rt := fake.New()
	rt.ImportFunc = func(req hfruntime.ImportRequest) (hfruntime.ImportResult, error) {
		// Swapped after the scan.
		if err := os.Remove(req.Source); err != nil {
			return hfruntime.ImportResult{}, err
		}
		if err := syscall.Mkfifo(req.Source, 0o644); err != nil {
			return hfruntime.ImportResult{}, err
		}
		rc, err := req.Open()
		if err != nil {
			return hfruntime.ImportResult{}, err
		}
		defer rc.Close()
		_, err = io.ReadAll(rc)
		return hfruntime.ImportResult{}, err
	}
	sum := Sync(context.Background(), rt, Config{ImageDirs: []string{dir}})
	if sum.Failed != 1 || !strings.Contains(sum.Failures[0].Error(), "not a regular file") {
		t.Errorf("import of a file swapped for a named pipe: %v %v", sum, sum.Failures)
	}
}
