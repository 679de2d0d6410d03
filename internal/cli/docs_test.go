package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/cmddoc"
	"github.com/holdfast-project/holdfast/internal/flagenv"
)

// commandsDocPath is docs/commands.md at the repository's root, from this
// package's directory.
var commandsDocPath = filepath.Join("..", "..", "docs", "commands.md")

// TestCommandsDocUpToDate: docs/commands.md is what cmddoc renders from the
// command tree. With HOLDFAST_UPDATE_DOCS=1 (make docs) the test writes
// the file instead.
func TestCommandsDocUpToDate(t *testing.T) {
	got := cmddoc.Render(New("test", ""), flagenv.Doc)
	if os.Getenv("HOLDFAST_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(commandsDocPath, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(commandsDocPath)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) == got {
		return
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
	line := 0
	for line < len(gl) && line < len(wl) && gl[line] == wl[line] {
		line++
	}
	var g, w string
	if line < len(gl) {
		g = gl[line]
	}
	if line < len(wl) {
		w = wl[line]
	}
	t.Fatalf("docs/commands.md is stale: run make docs\nfirst difference, line %d:\n  file:     %q\n  rendered: %q", line+1, w, g)
}
