package cli

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestExportOutput: what export writes goes to a hidden .partial file
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

	out, err := openExportOutput(path, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := out.w.Write([]byte("half")); err != nil {
		t.Fatal(err)
	}
	if es := entries(); len(es) != 1 || es[0][0] != '.' || filepath.Ext(es[0]) != ".partial" {
		t.Errorf("while writing, the dir holds %v; want one hidden .partial file", es)
	}
	out.abort()
	if es := entries(); len(es) != 0 {
		t.Errorf("after abort, the dir holds %v", es)
	}

	out, err = openExportOutput(path, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := out.w.Write([]byte("whole")); err != nil {
		t.Fatal(err)
	}
	if err := out.commit(); err != nil {
		t.Fatal(err)
	}
	out.abort() // after commit: nothing to undo
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "whole" || fi.Mode().Perm() != 0o644 || out.size() != 5 {
		t.Errorf("FILE %q, mode %v, size %d; want \"whole\", 0644, 5", b, fi.Mode(), out.size())
	}
	if es := entries(); len(es) != 1 || es[0] != "node.tar.zst" {
		t.Errorf("after commit, the dir holds %v", es)
	}
}
