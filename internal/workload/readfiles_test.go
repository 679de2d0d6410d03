package workload

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadFiles: "-" is standard input, a file that cannot be read is an
// error naming it, and the files after it are still read.
func TestReadFiles(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "images.txt")
	if err := os.WriteFile(file, []byte("registry.example/app:v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.yaml")
	set := ReadFiles([]string{"-", missing, file}, strings.NewReader("registry.example/web:v2\n"))
	var refs []string
	for _, img := range set.Images() {
		refs = append(refs, img.Ref)
	}
	if got := strings.Join(refs, " "); !strings.Contains(got, "registry.example/web:v2") || !strings.Contains(got, "registry.example/app:v1") {
		t.Errorf("images %q, want web:v2 from standard input and app:v1 from %s", got, file)
	}
	if len(set.Errors) != 1 || !strings.Contains(set.Errors[0].Error(), "reading "+missing) {
		t.Errorf("errors %v, want one naming %s", set.Errors, missing)
	}
}
