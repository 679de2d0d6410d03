package exporter_test

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/holdfast-project/holdfast/internal/exporter"
)

// TestExportOutput: what an export writes goes to a hidden .partial file
// beside FILE; commit renames it to FILE (mode 0644), abort removes it,
// and FILE is never there half-written.
func TestExportOutput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "node.tar.zst")
	entries := func() []string {
		es, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		return names
	}

	out, err := exporter.CreateOutput(path, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := out.Write([]byte("half")); err != nil {
		t.Fatal(err)
	}
	if es := entries(); len(es) != 1 || es[0][0] != '.' || filepath.Ext(es[0]) != ".partial" {
		t.Errorf("while writing, the dir holds %v; want one hidden .partial file", es)
	}
	out.Abort()
	if es := entries(); len(es) != 0 {
		t.Errorf("after abort, the dir holds %v", es)
	}

	out, err = exporter.CreateOutput(path, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := out.Write([]byte("whole")); err != nil {
		t.Fatal(err)
	}
	if err := out.Commit(); err != nil {
		t.Fatal(err)
	}
	out.Abort() // after commit: nothing to undo
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "whole" || fi.Mode().Perm() != 0o644 || out.Size() != 5 {
		t.Errorf("FILE %q, mode %v, size %d; want \"whole\", 0644, 5", b, fi.Mode(), out.Size())
	}
	if es := entries(); len(es) != 1 || es[0] != "node.tar.zst" {
		t.Errorf("after commit, the dir holds %v", es)
	}
}
