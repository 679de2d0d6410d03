package pass

import (
	"context"
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
	archive := filepath.Join(dir, "p.tar")
	tarHeader := make([]byte, 512)
	copy(tarHeader[257:], "ustar")
	if err := os.WriteFile(archive, tarHeader, 0o644); err != nil {
		t.Fatal(err)
	}
	rt := fake.New()
	rt.OnImport = func(req hfruntime.ImportRequest) error {
		// Swapped after the scan, before the import opens it.
		if err := os.Remove(req.Source); err != nil {
			return err
		}
		return syscall.Mkfifo(req.Source, 0o644)
	}
	sum := Sync(context.Background(), rt, Config{ImageDirs: []string{dir}})
	if sum.Failed != 1 || !strings.Contains(sum.Failures[0].Error(), "not a regular file") {
		t.Errorf("import of a file swapped for a named pipe: %v %v", sum, sum.Failures)
	}
}
